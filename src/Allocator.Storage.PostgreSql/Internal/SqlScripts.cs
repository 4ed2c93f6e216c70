using System.Collections.Concurrent;
using System.Globalization;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// The embedded .sql files: operations (<c>Sql/</c>), read once and rendered with <c>{schema}</c>
/// replaced by the quoted schema; and the migrator's input (<see cref="MigrationSet"/>).
/// </summary>
internal sealed class SqlScripts(string schema)
{
    private const string SqlPrefix = "Allocator.Storage.PostgreSql.Sql.";
    private static readonly ConcurrentDictionary<string, string> RawCache = new(StringComparer.Ordinal);

    private readonly string _quoted = SchemaName.Quote(schema);
    private readonly ConcurrentDictionary<string, string> _cache = new(StringComparer.Ordinal);

    public string Get(string name) => _cache.GetOrAdd(name, n => Substitute(ReadRaw(SqlPrefix + n + ".sql")));

    public string Substitute(string sql) => sql.Replace("{schema}", _quoted, StringComparison.Ordinal);

    /// <summary>Every embedded resource whose name starts with <paramref name="prefix"/>, as (file name without .sql, text), ordered by name.</summary>
    internal static IReadOnlyList<(string Name, string Text)> Resources(string prefix) =>
        [.. typeof(SqlScripts).Assembly.GetManifestResourceNames()
            .Where(r => r.StartsWith(prefix, StringComparison.Ordinal) && r.EndsWith(".sql", StringComparison.Ordinal))
            .Order(StringComparer.Ordinal)
            .Select(r => (r[prefix.Length..^".sql".Length], ReadRaw(r)))];

    private static string ReadRaw(string resource) => RawCache.GetOrAdd(resource, static r =>
    {
        using var stream = Assembly.GetExecutingAssembly().GetManifestResourceStream(r)
            ?? throw new InvalidOperationException($"Embedded SQL resource '{r}' is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    });
}

/// <summary>
/// What the migrator applies: numbered schema migrations (<c>Migrations/NNNN_name.sql</c>, each
/// applied once, in order) and function files (<c>Functions/name.sql</c>, <c>CREATE OR REPLACE</c>,
/// applied whenever their text changes). Tests build their own sets.
/// </summary>
internal sealed record MigrationSet(IReadOnlyList<Migration> Migrations, IReadOnlyList<FunctionScript> Functions)
{
    private const string MigrationPrefix = "Allocator.Storage.PostgreSql.Migrations.";
    private const string FunctionPrefix = "Allocator.Storage.PostgreSql.Functions.";

    /// <summary>The files embedded in this assembly.</summary>
    public static MigrationSet Embedded { get; } = new(
        [.. SqlScripts.Resources(MigrationPrefix).Select(r => Migration.Parse(r.Name, r.Text)).OrderBy(m => m.Version)],
        [.. SqlScripts.Resources(FunctionPrefix).Select(r => new FunctionScript(r.Name, r.Text))]);

    /// <summary>SHA-256 of the text with line endings normalized (a checkout's CRLF does not count as an edit), hex.</summary>
    public static string Checksum(string text) =>
        Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(text.Replace("\r\n", "\n", StringComparison.Ordinal))));
}

/// <summary>One schema migration.</summary>
/// <param name="NoTransaction">
/// The file's first line is <c>-- allocator:no-transaction</c>: its statements run one by one in
/// autocommit, for what PostgreSQL refuses inside a transaction (<c>CREATE INDEX CONCURRENTLY</c>,
/// which builds an index on a live table without blocking its writes). Each statement must be
/// safe to run again (e.g. <c>DROP INDEX CONCURRENTLY IF EXISTS</c> first), because a failure
/// part-way leaves the earlier statements applied and the migration unrecorded.
/// </param>
internal sealed record Migration(int Version, string Name, string Text, bool NoTransaction)
{
    public const string NoTransactionMarker = "-- allocator:no-transaction";

    public string Checksum => MigrationSet.Checksum(Text);

    public static Migration Parse(string name, string text)
    {
        var underscore = name.IndexOf('_', StringComparison.Ordinal);
        if (name.Length < 6 || underscore != 4 || !int.TryParse(name.AsSpan(0, 4), NumberStyles.None, CultureInfo.InvariantCulture, out var version))
        {
            throw new InvalidOperationException($"Migration '{name}.sql' is not named NNNN_description.sql.");
        }

        return new Migration(version, name, text, text.StartsWith(NoTransactionMarker, StringComparison.Ordinal));
    }

    /// <summary>
    /// The statements of a no-transaction migration: split at a <c>;</c> that ends a line. Such a
    /// migration holds plain statements only (no function bodies, no string containing <c>;</c> at
    /// a line end), which is checked here.
    /// </summary>
    public IReadOnlyList<string> Statements()
    {
        if (Text.Contains('$', StringComparison.Ordinal))
        {
            throw new InvalidOperationException($"Migration '{Name}' runs without a transaction and may hold plain statements only (no $ quoting).");
        }

        var statements = new List<string>();
        var current = new StringBuilder();
        foreach (var line in Text.Replace("\r\n", "\n", StringComparison.Ordinal).Split('\n'))
        {
            var trimmed = line.Trim();
            if (trimmed.Length == 0 || trimmed.StartsWith("--", StringComparison.Ordinal))
            {
                continue;
            }

            current.AppendLine(line);
            if (trimmed.EndsWith(';'))
            {
                statements.Add(current.ToString());
                current.Clear();
            }
        }

        if (current.ToString().Trim().Length > 0)
        {
            throw new InvalidOperationException($"Migration '{Name}' ends with a statement that has no closing ';'.");
        }

        return statements;
    }
}

/// <summary>One function file (<c>CREATE OR REPLACE FUNCTION …</c>).</summary>
internal sealed record FunctionScript(string Name, string Text)
{
    public string Checksum => MigrationSet.Checksum(Text);
}
