using System.Text.RegularExpressions;

namespace Allocator.Clustering.PostgreSql;

/// <summary>
/// The clustering schema's name is spliced into DDL and into the connection string's search path,
/// so only plain lower-case identifiers are accepted. Lower case because the search path is parsed
/// like SQL: an unquoted name there is folded to lower case, and a schema created as "Cluster"
/// would then not be found.
/// </summary>
internal static partial class ClusteringSchemaName
{
    public static void Validate(string? schema)
    {
        if (schema is null || !Identifier().IsMatch(schema))
        {
            throw new ArgumentException(
                $"Schema '{schema}' must be 1–63 characters of [a-z0-9_] (lower case), starting with a letter or underscore.",
                nameof(schema));
        }

        if (schema.StartsWith("pg_", StringComparison.Ordinal))
        {
            throw new ArgumentException($"Schema '{schema}': names starting with 'pg_' are reserved by PostgreSQL.", nameof(schema));
        }
    }

    /// <summary>The schema as a quoted identifier; safe because <see cref="Validate"/> admits no quote.</summary>
    public static string Quote(string schema)
    {
        Validate(schema);
        return "\"" + schema + "\"";
    }

    [GeneratedRegex("^[a-z_][a-z0-9_]{0,62}$", RegexOptions.CultureInvariant)]
    private static partial Regex Identifier();
}
