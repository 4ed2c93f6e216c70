using System.Text.RegularExpressions;

namespace Allocator.Host.Options;

/// <summary>
/// The named databases of the configuration (issue 23, ADR 0023): <c>Allocator:Databases:{name}</c>
/// connection strings, plus <c>ConnectionStrings:Allocator</c> (or <c>Allocator:Storage:ConnectionString</c>)
/// as the database named <c>default</c>, and which of them is the default
/// (<c>Allocator:Storage:DefaultDatabase</c>): the one that holds the pool directory, the cluster's
/// membership and every pool without a directory entry. Read from the configuration once, when
/// the host is built; <see cref="Errors"/> fail the start (<see cref="StorageOptionsValidator"/>).
/// </summary>
internal sealed partial class ConfiguredDatabases
{
    public const string Section = "Allocator:Databases";

    /// <summary>The name <c>ConnectionStrings:Allocator</c> takes among the databases.</summary>
    public const string DefaultName = "default";

    private ConfiguredDatabases(IReadOnlyList<(string Name, string ConnectionString)> databases, string? defaultDatabase, IReadOnlyList<string> errors)
    {
        All = databases;
        Default = defaultDatabase ?? DefaultName;
        Errors = errors;
    }

    /// <summary>Name (lower case) and connection string of every database, the default first.</summary>
    public IReadOnlyList<(string Name, string ConnectionString)> All { get; }

    /// <summary>The default database's name.</summary>
    public string Default { get; }

    /// <summary>Every problem found, each naming its setting; empty when the configuration is usable.</summary>
    public IReadOnlyList<string> Errors { get; }

    /// <summary>More than one database: pools are routed through the directory.</summary>
    public bool Several => All.Count > 1;

    /// <summary>The default database's connection string, or null when no database is configured.</summary>
    public string? DefaultConnectionString => All.Count > 0 && Errors.Count == 0 ? All[0].ConnectionString : null;

    public static ConfiguredDatabases Read(IConfiguration configuration)
    {
        var errors = new List<string>();
        var databases = new List<(string Name, string ConnectionString)>();
        var single = configuration[AllocatorStorageOptions.Section + ":ConnectionString"] is { Length: > 0 } storage ? storage : configuration.GetConnectionString("Allocator");
        if (!string.IsNullOrWhiteSpace(single))
        {
            databases.Add((DefaultName, WithFailoverDefaults(single)));
        }

        foreach (var child in configuration.GetSection(Section).GetChildren())
        {
            // Configuration keys are case-insensitive: names are lower case everywhere (the directory stores them).
            var name = child.Key.ToLowerInvariant();
            if (CheckName(name) is { } nameError)
            {
                errors.Add($"{Section}:{child.Key}: {nameError}");
            }
            else if (databases.Any(d => d.Name == name))
            {
                errors.Add($"{Section}:{child.Key} names the database that ConnectionStrings:Allocator already is ('{DefaultName}'); give it another name or drop one of the two.");
            }
            else if (string.IsNullOrWhiteSpace(child.Value))
            {
                errors.Add($"{Section}:{child.Key} is empty: give the database's connection string.");
            }
            else
            {
                databases.Add((name, WithFailoverDefaults(child.Value)));
            }
        }

        var chosen = configuration[AllocatorStorageOptions.Section + ":DefaultDatabase"]?.Trim().ToLowerInvariant();
        if (string.IsNullOrEmpty(chosen))
        {
            chosen = databases.Any(d => d.Name == DefaultName) ? DefaultName
                : databases.Count == 1 ? databases[0].Name
                : null;
            if (chosen is null && databases.Count > 1)
            {
                errors.Add($"{AllocatorStorageOptions.Section}:DefaultDatabase must name the default database (it holds the pool directory) among {string.Join(", ", databases.Select(d => d.Name))}.");
            }
        }
        else if (databases.Count > 0 && databases.All(d => d.Name != chosen))
        {
            errors.Add($"{AllocatorStorageOptions.Section}:DefaultDatabase '{chosen}' is not a configured database ({string.Join(", ", databases.Select(d => d.Name))}).");
        }

        // The default first: it is started first and its failure stops the start.
        var ordered = databases.OrderBy(d => d.Name == chosen ? 0 : 1).ToList();
        return new ConfiguredDatabases(ordered, chosen, errors);
    }

    /// <summary>
    /// A connection string naming several hosts (a primary and its standbys, issue 48) rechecks a
    /// host's state after 1 s rather than Npgsql's 10 s, unless it sets <c>Host Recheck Seconds</c>
    /// itself. Npgsql keeps what it last saw of each host: after a failover the promoted standby
    /// stayed "a standby" in that cache for up to 10 s, and every connection in that time failed
    /// with "no suitable host" (the pool served again 0–10 s after the promotion; with 1 s, within
    /// about half a second). A check costs one query per host when a connection is opened.
    /// </summary>
    internal static string WithFailoverDefaults(string connectionString)
    {
        var given = new System.Data.Common.DbConnectionStringBuilder();
        try
        {
            given.ConnectionString = connectionString;
        }
        catch (ArgumentException)
        {
            return connectionString; // the store reports a malformed string in its own words
        }

        // Npgsql's Host only: SQL Server writes its port after a comma in Server ("Server=h,1433").
        var several = given.TryGetValue("Host", out var host) && host?.ToString()?.Contains(',', StringComparison.Ordinal) == true;
        if (!several || given.ContainsKey("Host Recheck Seconds") || given.ContainsKey("HostRecheckSeconds"))
        {
            return connectionString;
        }

        return connectionString.TrimEnd().TrimEnd(';') + ";Host Recheck Seconds=1";
    }

    /// <summary>The problem with a database name, or null: 1–63 of [a-z0-9_-], starting with a letter or digit.</summary>
    public static string? CheckName(string? name) =>
        name is not null && Name().IsMatch(name) ? null : $"the database name '{name}' must be 1-63 characters of [a-z0-9_-], starting with a letter or digit.";

    [GeneratedRegex("^[a-z0-9][a-z0-9_-]{0,62}$", RegexOptions.CultureInvariant)]
    private static partial Regex Name();
}
