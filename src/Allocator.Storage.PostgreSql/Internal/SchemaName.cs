using System.Text.RegularExpressions;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>Schema names are spliced into SQL text, so only plain identifiers are accepted, and always quoted.</summary>
internal static partial class SchemaName
{
    public static void Validate(string? schema)
    {
        if (Check(schema) is { } error)
        {
            throw new ArgumentException(error, nameof(schema));
        }
    }

    /// <summary>The problem with <paramref name="schema"/>, or <see langword="null"/> when it is a plain identifier.</summary>
    public static string? Check(string? schema) =>
        schema is null || !Identifier().IsMatch(schema)
            ? $"Schema '{schema}' must be 1–63 characters of [A-Za-z0-9_], starting with a letter or underscore."
            : null;

    /// <summary>The schema as a quoted identifier; safe because <see cref="Validate"/> admits no quote.</summary>
    public static string Quote(string schema)
    {
        Validate(schema);
        return "\"" + schema + "\"";
    }

    [GeneratedRegex("^[A-Za-z_][A-Za-z0-9_]{0,62}$", RegexOptions.CultureInvariant)]
    private static partial Regex Identifier();
}
