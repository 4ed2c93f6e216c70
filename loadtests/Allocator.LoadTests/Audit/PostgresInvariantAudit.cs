using System.Reflection;
using System.Text.RegularExpressions;
using Allocator.LoadTests.Harness;
using Npgsql;
using NpgsqlTypes;

namespace Allocator.LoadTests.Audit;

/// <summary>
/// The invariant audit in SQL over one Allocator schema (<c>Audit/*.sql</c>, embedded): load
/// equals the units of active allocations and stays within capacity, no duplicate active
/// allocation per (pool, session key), and every successful reply has its committed row.
/// </summary>
internal static partial class PostgresInvariantAudit
{
    private static readonly string InvariantsSql = Load("invariants.sql");
    private static readonly string RepliesSql = Load("replies-committed.sql");
    private static readonly string CountsSql = Load("counts.sql");

    /// <param name="dataSource">A direct connection to the database (not through the latency proxy).</param>
    /// <param name="poolId">Audit one pool, or all pools when null.</param>
    /// <param name="replies">Ids of every successful reply the run received.</param>
    public static async Task<AuditResult> AuditAsync(NpgsqlDataSource dataSource, string schema, string? poolId, IReadOnlyCollection<Guid> replies, CancellationToken cancellationToken)
    {
        var quoted = QuoteSchema(schema);
        var violations = new List<AuditViolation>();
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken);

        long workers, active, total;
        await using (var counts = new NpgsqlCommand(CountsSql.Replace("{schema}", quoted, StringComparison.Ordinal), connection))
        {
            AddPool(counts, poolId);
            await using var reader = await counts.ExecuteReaderAsync(cancellationToken);
            await reader.ReadAsync(cancellationToken);
            (workers, active, total) = (reader.GetInt64(0), reader.GetInt64(1), reader.GetInt64(2));
        }

        await using (var invariants = new NpgsqlCommand(InvariantsSql.Replace("{schema}", quoted, StringComparison.Ordinal), connection))
        {
            AddPool(invariants, poolId);
            await using var reader = await invariants.ExecuteReaderAsync(cancellationToken);
            while (await reader.ReadAsync(cancellationToken))
            {
                violations.Add(new AuditViolation(
                    reader.GetString(0),
                    reader.IsDBNull(1) ? null : reader.GetString(1),
                    reader.IsDBNull(2) ? null : reader.GetString(2),
                    reader.GetString(3)));
            }
        }

        await using (var committed = new NpgsqlCommand(RepliesSql.Replace("{schema}", quoted, StringComparison.Ordinal), connection))
        {
            committed.Parameters.Add(new NpgsqlParameter("allocation_ids", NpgsqlDbType.Array | NpgsqlDbType.Uuid) { Value = replies.ToArray() });
            await using var reader = await committed.ExecuteReaderAsync(cancellationToken);
            while (await reader.ReadAsync(cancellationToken))
            {
                violations.Add(new AuditViolation("reply-without-row", poolId, null, $"allocation {reader.GetGuid(0)} was answered but has no committed row"));
            }
        }

        return new AuditResult(
            $"postgres schema {schema}" + (poolId is null ? "" : $" pool {poolId}"),
            [
                $"{workers:N0} workers: load = units of active allocations, 0 <= load <= capacity",
                $"{total:N0} allocations ({active:N0} active): no duplicate active (pool, session key), none active on a missing worker",
                $"{replies.Count:N0} successful replies each have a committed row",
            ],
            violations);
    }

    /// <summary>Validates a schema name (letters, digits, underscore) and quotes it for SQL.</summary>
    public static string QuoteSchema(string schema) =>
        SchemaName().IsMatch(schema) ? $"\"{schema}\"" : throw new ArgumentException($"Invalid schema name '{schema}'.", nameof(schema));

    internal static string Load(string name)
    {
        var assembly = Assembly.GetExecutingAssembly();
        using var stream = assembly.GetManifestResourceStream($"Allocator.LoadTests.Sql.{name}")
            ?? throw new InvalidOperationException($"Embedded SQL '{name}' is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }

    private static void AddPool(NpgsqlCommand command, string? poolId) =>
        command.Parameters.Add(new NpgsqlParameter("pool_id", NpgsqlDbType.Text) { Value = (object?)poolId ?? DBNull.Value });

    [GeneratedRegex("^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
    private static partial Regex SchemaName();
}
