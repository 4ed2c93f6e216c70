using System.Reflection;
using Npgsql;

namespace Allocator.Reliability.Faults;

/// <summary>Faults injected from inside PostgreSQL: terminated backends and a competing session holding rows.</summary>
internal static class DatabaseFaults
{
    private static readonly string TerminateSql = Sql.Load("terminate-backends.sql");
    private static readonly string HoldSql = Sql.Load("hold-least-loaded.sql");

    /// <summary><c>pg_terminate_backend</c> of the cluster's backends: <c>all</c>, <c>lock-waiters</c> or <c>listener</c>.</summary>
    /// <param name="connectionString">A direct connection (never through the latency proxy).</param>
    public static async Task<long> TerminateAsync(string connectionString, string applicationNamePattern, string which, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var command = new NpgsqlCommand(TerminateSql, connection);
        command.Parameters.AddWithValue("pattern", applicationNamePattern);
        command.Parameters.AddWithValue("which", which);
        return (long)(await command.ExecuteScalarAsync(cancellationToken))!;
    }

    /// <summary>
    /// Locks the pool's <paramref name="count"/> least-loaded workers for <paramref name="holdFor"/>, then rolls back.
    /// Returns how many rows it held: none when <paramref name="cancellationToken"/> (the scenario's stop)
    /// fires before they are held, which is a scenario ending, not a failure.
    /// </summary>
    public static async Task<int> HoldLeastLoadedAsync(string connectionString, string schema, string pool, int count, TimeSpan holdFor, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        NpgsqlTransaction transaction;
        var held = 0;
        try
        {
            await connection.OpenAsync(cancellationToken);
            transaction = await connection.BeginTransactionAsync(cancellationToken);
            await using var command = new NpgsqlCommand(HoldSql.Replace("{schema}", Sql.Quote(schema), StringComparison.Ordinal), connection, transaction);
            command.Parameters.AddWithValue("pool", pool);
            command.Parameters.AddWithValue("n", count);
            await using var reader = await command.ExecuteReaderAsync(cancellationToken);
            while (await reader.ReadAsync(cancellationToken))
            {
                held++;
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return 0; // stopped while connecting or locking (the connection's disposal rolls back)
        }

        await using var holding = transaction;
        try
        {
            await Task.Delay(holdFor, cancellationToken);
        }
        catch (OperationCanceledException)
        {
            // Stop holding early.
        }

        await transaction.RollbackAsync(CancellationToken.None);
        return held;
    }
}

internal static class Sql
{
    public static string Load(string name)
    {
        using var stream = Assembly.GetExecutingAssembly().GetManifestResourceStream("Allocator.Reliability.Sql." + name)
            ?? throw new InvalidOperationException($"Embedded SQL '{name}' is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }

    /// <summary>Quotes a schema name made of letters, digits and underscores.</summary>
    public static string Quote(string schema) =>
        schema.All(c => char.IsAsciiLetterOrDigit(c) || c == '_') ? $"\"{schema}\"" : throw new ArgumentException($"Invalid schema name '{schema}'.", nameof(schema));
}
