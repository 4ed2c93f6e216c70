namespace Allocator.Storage.SqlServer.Internal;

/// <summary>The store's schema name: validated, then bracket-quoted for the scripts' <c>{schema}</c> token.</summary>
internal static class SqlIdentifier
{
    public const int MaxLength = 64;

    public static string? Check(string? name)
    {
        if (string.IsNullOrEmpty(name) || name.Length > MaxLength)
        {
            return $"Schema must be 1–{MaxLength} characters.";
        }

        if (!(char.IsAsciiLetter(name[0]) || name[0] == '_'))
        {
            return "Schema must start with an ASCII letter or underscore.";
        }

        foreach (var c in name)
        {
            if (!(char.IsAsciiLetterOrDigit(c) || c == '_'))
            {
                return "Schema may contain only ASCII letters, digits and underscores.";
            }
        }

        return null;
    }

    /// <summary>
    /// Bracket-quotes a validated name, doubling <c>]</c> as QUOTENAME does (a validated name has
    /// none; the escape is a second line of defence). The result is also safe inside an N'…' literal.
    /// </summary>
    public static string Quote(string name)
    {
        if (Check(name) is { } error)
        {
            throw new ArgumentException(error, nameof(name));
        }

        return "[" + name.Replace("]", "]]", StringComparison.Ordinal) + "]";
    }
}
