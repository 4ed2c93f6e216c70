using System.Globalization;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;

namespace Allocator.Clustering.PostgreSql;

/// <summary>One numbered schema migration: <c>Migrations/NNNN_name.sql</c>.</summary>
internal sealed record ClusteringMigration(int Version, string Name, string Sql)
{
    /// <summary>
    /// SHA-256 of the file as written (line endings normalized, so a checkout with CRLF does not
    /// look edited), before the schema name is substituted: the same migration has the same
    /// checksum in every schema. Computed on read, so a copy made with <c>with</c> cannot keep a stale one.
    /// </summary>
    public string Checksum => ClusteringScripts.Checksum(Sql);
}

/// <summary>
/// The SQL this project runs: numbered migrations (schema only) and one query file per key of the
/// provider's contract (<c>Sql/&lt;QueryKey&gt;.sql</c>). Read from the embedded resources once;
/// tests build their own instances to stand for an edited file.
/// </summary>
internal sealed class ClusteringScripts
{
    private const string SqlPrefix = "Allocator.Clustering.PostgreSql.Sql.";
    private const string MigrationPrefix = "Allocator.Clustering.PostgreSql.Migrations.";

    private static readonly Lazy<ClusteringScripts> EmbeddedScripts = new(LoadEmbedded);

    public ClusteringScripts(IEnumerable<ClusteringMigration> migrations, IReadOnlyDictionary<string, string> queries)
    {
        Migrations = [.. migrations.OrderBy(m => m.Version)];
        for (var i = 1; i < Migrations.Count; i++)
        {
            if (Migrations[i].Version == Migrations[i - 1].Version)
            {
                throw new InvalidOperationException($"Two clustering migrations share version {Migrations[i].Version}.");
            }
        }

        Queries = new SortedDictionary<string, string>(queries.ToDictionary(), StringComparer.Ordinal);
    }

    /// <summary>The scripts embedded in this assembly.</summary>
    public static ClusteringScripts Embedded => EmbeddedScripts.Value;

    /// <summary>Migrations in version order; <c>{schema}</c> not yet substituted.</summary>
    public IReadOnlyList<ClusteringMigration> Migrations { get; }

    /// <summary>Query key → query text, as stored in <c>orleansquery</c>.</summary>
    public IReadOnlyDictionary<string, string> Queries { get; }

    public static string Checksum(string sql)
    {
        var normalized = sql.Replace("\r\n", "\n", StringComparison.Ordinal);
        return Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(normalized)));
    }

    private static ClusteringScripts LoadEmbedded()
    {
        var assembly = typeof(ClusteringScripts).Assembly;
        var migrations = new List<ClusteringMigration>();
        var queries = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var resource in assembly.GetManifestResourceNames())
        {
            if (resource.StartsWith(MigrationPrefix, StringComparison.Ordinal))
            {
                var name = resource[MigrationPrefix.Length..^".sql".Length];
                var underscore = name.IndexOf('_', StringComparison.Ordinal);
                if (underscore <= 0 || !int.TryParse(name.AsSpan(0, underscore), NumberStyles.None, CultureInfo.InvariantCulture, out var version))
                {
                    throw new InvalidOperationException($"Clustering migration '{name}' is not named NNNN_description.sql.");
                }

                migrations.Add(new ClusteringMigration(version, name, Read(assembly, resource)));
            }
            else if (resource.StartsWith(SqlPrefix, StringComparison.Ordinal))
            {
                queries.Add(resource[SqlPrefix.Length..^".sql".Length], Read(assembly, resource));
            }
        }

        return new ClusteringScripts(migrations, queries);
    }

    private static string Read(Assembly assembly, string resource)
    {
        using var stream = assembly.GetManifestResourceStream(resource)
            ?? throw new InvalidOperationException($"Embedded SQL resource '{resource}' is missing.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }
}
