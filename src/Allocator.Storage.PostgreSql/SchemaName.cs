using System.Text.RegularExpressions;

namespace Allocator.Storage.PostgreSql;

/// <summary>Schema names are spliced into SQL text, so only plain identifiers are accepted, and always quoted.</summary>
internal static partial class SchemaName
{
    public static void Validate(string? schema)
    {
        if (schema is null || !Identifier().IsMatch(schema))
        {
            throw new ArgumentException(
                $"Schema '{schema}' must be 1–63 characters of [A-Za-z0-9_], starting with a letter or underscore.", nameof(schema));
        }
    }

    /// <summary>The schema as a quoted identifier; safe because <see cref="Validate"/> admits no quote.</summary>
    public static string Quote(string schema)
    {
        Validate(schema);
        return "\"" + schema + "\"";
    }

    [GeneratedRegex("^[A-Za-z_][A-Za-z0-9_]{0,62}$", RegexOptions.CultureInvariant)]
    private static partial Regex Identifier();
}
