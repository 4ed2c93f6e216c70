namespace Allocator.Host.Auth;

/// <summary>
/// The pools a broker key may use: a comma-separated list of pool names and patterns, where
/// <c>*</c> stands for any run of characters (<c>render-*</c>, <c>*-eu</c>, <c>*</c>). Matched
/// ordinally, as pool ids compare everywhere else.
/// </summary>
internal sealed class PoolGrant
{
    private readonly string[][] _patterns;

    private PoolGrant(string text, string[][] patterns)
    {
        Text = text;
        _patterns = patterns;
    }

    /// <summary>Every pool.</summary>
    public static PoolGrant All { get; } = new("*", [["", ""]]);

    /// <summary>The grant as configured.</summary>
    public string Text { get; }

    public bool GrantsEverything => _patterns.Any(p => p is ["", ""]);

    /// <summary>Parses a grant; null with <paramref name="error"/> when one of its entries is not a pool id with optional <c>*</c>.</summary>
    public static PoolGrant? Parse(string text, out string? error)
    {
        error = null;
        var entries = text.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (entries.Length == 0)
        {
            error = "lists no pool";
            return null;
        }

        var patterns = new string[entries.Length][];
        for (var i = 0; i < entries.Length; i++)
        {
            var parts = entries[i].Split('*');
            if (entries[i].Length > AllocatorLimits.MaxIdLength || !parts.All(p => p.All(IsIdCharacter)))
            {
                error = $"'{entries[i]}' is not a pool id or a pattern of pool id characters and *";
                return null;
            }

            patterns[i] = parts;
        }

        return new PoolGrant(text, patterns);
    }

    /// <summary>The characters of pool ids (<see cref="AllocatorValidation.CheckId"/>).</summary>
    private static bool IsIdCharacter(char c) => char.IsAsciiLetterOrDigit(c) || c is '.' or '_' or ':' or '@' or '-';

    public bool Allows(string? pool) => pool is not null && _patterns.Any(p => Matches(pool, p));

    /// <summary>A pattern's literal parts in order, with anything between them (and nothing before the first or after the last unless it is empty).</summary>
    private static bool Matches(string pool, string[] parts)
    {
        if (parts.Length == 1)
        {
            return string.Equals(pool, parts[0], StringComparison.Ordinal);
        }

        if (!pool.StartsWith(parts[0], StringComparison.Ordinal) || !pool.EndsWith(parts[^1], StringComparison.Ordinal)
            || pool.Length < parts[0].Length + parts[^1].Length)
        {
            return false;
        }

        var at = parts[0].Length;
        var end = pool.Length - parts[^1].Length;
        for (var i = 1; i < parts.Length - 1; i++)
        {
            var found = pool.IndexOf(parts[i], at, end - at, StringComparison.Ordinal);
            if (found < 0)
            {
                return false;
            }

            at = found + parts[i].Length;
        }

        return true;
    }
}
