using System.Globalization;
using System.Reflection;
using System.Text.RegularExpressions;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>One embedded T-SQL file, rendered for one store.</summary>
internal sealed record SqlScript(string Name, string Text)
{
    /// <summary>The <c>@names</c> the text uses without declaring them: each must be a command parameter.</summary>
    public IReadOnlySet<string> Parameters { get; } = SqlText.FreeVariables(Text);
}

/// <summary>An embedded, numbered migration.</summary>
internal sealed record SqlMigration(int Version, string Name, string RawText)
{
    /// <summary>SHA-256 of the text with line endings normalized (a checkout's CRLF is not an edit), lower-case hex.</summary>
    public string Checksum => Convert.ToHexStringLower(System.Security.Cryptography.SHA256.HashData(
        System.Text.Encoding.UTF8.GetBytes(RawText.Replace("\r\n", "\n", StringComparison.Ordinal))));
}

/// <summary>
/// The embedded T-SQL: loaded once, then rendered per store. Three tokens only, all decided by
/// the store's validated options and never by a caller: <c>{schema}</c> (the bracket-quoted
/// schema), <c>{lock_timeout_ms}</c> (an integer; <c>SET LOCK_TIMEOUT</c> takes a constant) and
/// <c>{statement_timeout_ms}</c> (an integer: each script's own time budget, see
/// <see cref="SqlServerWorkerStore.StatementTimeout"/>). Every other value reaches SQL Server as
/// a parameter.
/// </summary>
internal sealed partial class SqlScripts
{
    public const string SchemaToken = "{schema}";
    public const string LockTimeoutToken = "{lock_timeout_ms}";
    public const string StatementTimeoutToken = "{statement_timeout_ms}";
    private const string SqlPrefix = "Allocator.Storage.SqlServer.Sql.";
    private const string MigrationPrefix = "Allocator.Storage.SqlServer.Migrations.";

    /// <summary>Operation scripts by name (file name without <c>.sql</c>), as embedded.</summary>
    public static IReadOnlyDictionary<string, string> RawOperations { get; } = Load(SqlPrefix);

    /// <summary>Migrations in ascending version order, as embedded.</summary>
    public static IReadOnlyList<SqlMigration> Migrations { get; } = LoadMigrations();

    private readonly Dictionary<string, SqlScript> _scripts;

    public SqlScripts(string schema, TimeSpan lockTimeout, TimeSpan statementTimeout)
    {
        QuotedSchema = SqlIdentifier.Quote(schema);
        LockTimeoutMs = checked((int)Math.Ceiling(lockTimeout.TotalMilliseconds));
        StatementTimeoutMs = checked((int)Math.Ceiling(statementTimeout.TotalMilliseconds));
        if (StatementTimeoutMs < LockTimeoutMs)
        {
            throw new ArgumentOutOfRangeException(nameof(statementTimeout), statementTimeout, "The statement's budget must not be below the lock timeout (timeouts nest).");
        }

        _scripts = RawOperations.ToDictionary(p => p.Key, p => new SqlScript(p.Key, Render(p.Value)), StringComparer.Ordinal);
    }

    public string QuotedSchema { get; }

    public int LockTimeoutMs { get; }

    public int StatementTimeoutMs { get; }

    public SqlScript this[string name] =>
        _scripts.TryGetValue(name, out var script) ? script : throw new KeyNotFoundException($"No embedded script '{name}.sql'.");

    public IEnumerable<SqlScript> All => _scripts.Values;

    /// <summary>The operation name of a rendered script text (for telemetry), or <c>sql</c>.</summary>
    public string NameOf(string commandText)
    {
        foreach (var script in _scripts.Values)
        {
            if (ReferenceEquals(script.Text, commandText))
            {
                return script.Name;
            }
        }

        return "sql";
    }

    public string Render(string raw) => raw
        .Replace(SchemaToken, QuotedSchema, StringComparison.Ordinal)
        .Replace(LockTimeoutToken, LockTimeoutMs.ToString(CultureInfo.InvariantCulture), StringComparison.Ordinal)
        .Replace(StatementTimeoutToken, StatementTimeoutMs.ToString(CultureInfo.InvariantCulture), StringComparison.Ordinal);

    private static Dictionary<string, string> Load(string prefix)
    {
        var assembly = typeof(SqlScripts).Assembly;
        var result = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var resource in assembly.GetManifestResourceNames().Where(n => n.StartsWith(prefix, StringComparison.Ordinal) && n.EndsWith(".sql", StringComparison.Ordinal)))
        {
            var name = resource[prefix.Length..^".sql".Length];
            result[name] = ReadResource(assembly, resource);
        }

        return result;
    }

    private static List<SqlMigration> LoadMigrations()
    {
        var migrations = new List<SqlMigration>();
        foreach (var (name, text) in Load(MigrationPrefix))
        {
            var match = MigrationName().Match(name);
            if (!match.Success)
            {
                throw new InvalidOperationException($"Migration '{name}.sql' is not named NNNN_description.sql.");
            }

            migrations.Add(new SqlMigration(int.Parse(match.Groups[1].Value, CultureInfo.InvariantCulture), name, text));
        }

        migrations.Sort((a, b) => a.Version.CompareTo(b.Version));
        return migrations;
    }

    private static string ReadResource(Assembly assembly, string resource)
    {
        using var stream = assembly.GetManifestResourceStream(resource) ?? throw new InvalidOperationException($"Missing resource {resource}.");
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }

    [GeneratedRegex(@"^(\d{4})_[a-z0-9_]+$")]
    private static partial Regex MigrationName();
}

/// <summary>Light lexical helpers over T-SQL text (no parser is available; see docs/sqlserver.md).</summary>
internal static partial class SqlText
{
    /// <summary>The text without comments and string literals, so that scans see code only.</summary>
    public static string StripCommentsAndStrings(string text) => CommentOrString().Replace(text, m => m.Value.StartsWith('\'') || m.Value.StartsWith('N') ? "''" : " ");

    /// <summary>Variables referenced but not declared in the text (case-insensitive, as T-SQL treats them).</summary>
    public static IReadOnlySet<string> FreeVariables(string text)
    {
        var code = StripCommentsAndStrings(text);
        var declared = Declared().Matches(code).Select(m => m.Groups[1].Value).ToHashSet(StringComparer.OrdinalIgnoreCase);
        var used = Variable().Matches(code).Select(m => m.Groups[1].Value).ToHashSet(StringComparer.OrdinalIgnoreCase);
        used.ExceptWith(declared);
        return used;
    }

    [GeneratedRegex(@"--[^\n]*|/\*.*?\*/|N?'(?:[^']|'')*'", RegexOptions.Singleline)]
    private static partial Regex CommentOrString();

    [GeneratedRegex(@"\bDECLARE\s+@(\w+)", RegexOptions.IgnoreCase)]
    private static partial Regex Declared();

    [GeneratedRegex(@"(?<![@\w])@(\w+)")]
    private static partial Regex Variable();
}
