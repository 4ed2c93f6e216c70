namespace Allocator.Host.Storage;

/// <summary>One database of the host (issue 23): its name, its store and the seams that store provides.</summary>
/// <param name="Placement">The store's directory and pool removal; null for a store that has none (a test's wrapper).</param>
internal sealed class Database(string name, bool isDefault, IWorkerStore store, IPoolChangeFeed changes, IPoolSettingsCache settings, IPoolPlacementStore? placement)
{
    private volatile string? _notStarted;

    public string Name { get; } = name;

    /// <summary>Holds the pool directory, the cluster's membership and every pool without a directory entry.</summary>
    public bool IsDefault { get; } = isDefault;

    public IWorkerStore Store { get; } = store;

    public IPoolChangeFeed Changes { get; } = changes;

    public IPoolSettingsCache Settings { get; } = settings;

    public IPoolPlacementStore? Placement { get; } = placement;

    /// <summary>Null once started (migrated, listening); otherwise why its pools cannot be served yet.</summary>
    public string? NotStarted
    {
        get => _notStarted;
        set => _notStarted = value;
    }

    /// <exception cref="AllocatorException">Unavailable (503, nothing written): the database has not started yet.</exception>
    public void EnsureStarted()
    {
        if (_notStarted is { } why)
        {
            throw new AllocatorException(AllocatorErrorKind.Unavailable, $"Database '{Name}' is not available yet ({why}); nothing was written. Retry later.", outcomeUnknown: false, innerException: null);
        }
    }

    public override string ToString() => Name;
}

/// <summary>
/// The databases this host serves pools from, the default first. One database (the common case,
/// and every test that brings its own store) is served exactly as before issue 23: its store is
/// the container's <see cref="IWorkerStore"/>, with no routing and no directory read. Several are
/// served through <see cref="RoutingWorkerStore"/>.
/// </summary>
internal sealed class Databases
{
    public Databases(IReadOnlyList<Database> all)
    {
        if (all.Count == 0 || !all[0].IsDefault || all.Skip(1).Any(d => d.IsDefault))
        {
            throw new ArgumentException("The default database comes first, and only it is the default.", nameof(all));
        }

        All = all;
    }

    public IReadOnlyList<Database> All { get; }

    public Database Default => All[0];

    /// <summary>More than one database: pools are routed through the directory.</summary>
    public bool Several => All.Count > 1;

    public Database? Find(string name)
    {
        foreach (var database in All)
        {
            if (string.Equals(database.Name, name, StringComparison.Ordinal))
            {
                return database;
            }
        }

        return null;
    }

    /// <summary>The one database of a host whose container holds one store (unkeyed).</summary>
    public static Databases Single(string name, IServiceProvider services)
    {
        var store = services.GetRequiredService<IWorkerStore>();
        return new Databases([new Database(
            name,
            isDefault: true,
            store,
            services.GetService<IPoolChangeFeed>() ?? (store as IPoolChangeFeed) ?? throw new InvalidOperationException("No IPoolChangeFeed is registered."),
            services.GetRequiredService<IPoolSettingsCache>(),
            store as IPoolPlacementStore)]);
    }

    /// <summary>Several databases, each registered under its name (keyed) by its store's <c>Add…(name, …)</c>.</summary>
    public static Databases Keyed(IReadOnlyList<string> names, IServiceProvider services) =>
        new([.. names.Select((name, i) => new Database(
            name,
            isDefault: i == 0,
            services.GetRequiredKeyedService<IWorkerStore>(name),
            services.GetRequiredKeyedService<IPoolChangeFeed>(name),
            services.GetRequiredKeyedService<IPoolSettingsCache>(name),
            services.GetRequiredKeyedService<IPoolPlacementStore>(name))
        {
            // Started by DatabaseStartup, which clears this.
            NotStarted = "starting",
        })]);
}
