using System.Collections.Concurrent;
using System.Reflection;

namespace Allocator.Storage.PostgreSql;

/// <summary>The embedded .sql files, read once and with <c>{schema}</c> replaced by the quoted schema.</summary>
internal sealed class SqlScripts(string schema)
{
    private const string SqlPrefix = "Allocator.Storage.PostgreSql.Sql.";
    private const string MigrationPrefix = "Allocator.Storage.PostgreSql.Migrations.";
    private static readonly ConcurrentDictionary<string, string> RawCache = new(StringComparer.Ordinal);

    private readonly string _quoted = SchemaName.Quote(schema);
    private readonly ConcurrentDictionary<string, string> _cache = new(StringComparer.Ordinal);

    public string Get(string name) => _cache.GetOrAdd(name, n => Substitute(ReadRaw(SqlPrefix + n + ".sql")));

    /// <summary>Migrations as (version, name, sql), ordered by version.</summary>
    public IReadOnlyList<(int Version, string Name, string Sql)> Migrations()
    {
        var list = new List<(int, string, string)>();
        foreach (var resource in typeof(SqlScripts).Assembly.GetManifestResourceNames())
        {
            if (!resource.StartsWith(MigrationPrefix, StringComparison.Ordinal))
            {
                continue;
            }

            var name = resource[MigrationPrefix.Length..^".sql".Length];
            var version = int.Parse(name.AsSpan(0, name.IndexOf('_', StringComparison.Ordinal)), System.Globalization.CultureInfo.InvariantCulture);
            list.Add((version, name, Substitute(ReadRaw(resource))));
        }

        list.Sort((a, b) => a.Item1.CompareTo(b.Item1));
        return list;
    }

    public string Substitute(string sql) => sql.Replace("{schema}", _quoted, StringComparison.Ordinal);

    private static string ReadRaw(string resource) => RawCache.GetOrAdd(resource, static r =>
    {
        using var stream = Assembly.GetExecutingAssembly().GetManifestResourceStream(r)
            ?? throw new InvalidOperationException($"Embedded SQL resource '{r}' is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    });
}
