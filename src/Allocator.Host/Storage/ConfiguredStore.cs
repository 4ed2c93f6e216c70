using Allocator.Host.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Registers the store named by the configuration (<c>Allocator:Storage:Provider</c>, else
/// PostgreSQL when a connection string is set, else in memory) through the store's own
/// <c>Add…</c> method, unless the embedding code (tests, the load harness) registered a store
/// already: then that one serves and the configured one is never created. With several databases
/// (<c>Allocator:Databases:{name}</c>, issue 23) each gets its own keyed store and the container's
/// <see cref="IWorkerStore"/> is the <see cref="RoutingWorkerStore"/> over them; with one, the
/// store is registered exactly as before, with nothing in between.
/// </summary>
internal static class ConfiguredStore
{
    /// <summary>Options of each database store beyond the connection string and timeouts, e.g. <c>Allocator:Storage:Postgres:Schema</c>.</summary>
    public const string PostgresSection = AllocatorStorageOptions.Section + ":Postgres";

    /// <inheritdoc cref="PostgresSection"/>
    public const string SqlServerSection = AllocatorStorageOptions.Section + ":SqlServer";

    public static IServiceCollection AddConfiguredStore(this IServiceCollection services, IConfiguration configuration)
    {
        var databases = ConfiguredDatabases.Read(configuration);
        if (services.Any(d => d.ServiceType == typeof(IWorkerStore)))
        {
            return services.AddSingleDatabase(ConfiguredDatabases.DefaultName);
        }

        var storage = new AllocatorStorageOptions();
        configuration.GetSection(AllocatorStorageOptions.Section).Bind(storage);
        storage.ConnectionString ??= databases.DefaultConnectionString;
        if (databases.Errors.Count > 0)
        {
            // Registers nothing: StorageOptionsValidator fails the start naming every problem.
            return services;
        }

        if (databases.Several && storage.EffectiveProvider is StorageProviders.Postgres or StorageProviders.SqlServer)
        {
            return services.AddSeveralDatabases(configuration, databases, storage.EffectiveProvider);
        }

        // Read here rather than through IOptions: a bad timeout is reported once, by its own
        // validator, not a second time by every options object built from it.
        var timeouts = new AllocatorTimeoutOptions();
        configuration.GetSection(AllocatorTimeoutOptions.Section).Bind(timeouts);
        switch (storage.EffectiveProvider)
        {
            case StorageProviders.Memory:
                services.AddAllocatorInMemory(o => o.LockTimeout = timeouts.LockTimeout);
                break;
            case StorageProviders.Postgres:
                services.AddAllocatorPostgres(storage.ConnectionString!, o =>
                {
                    configuration.GetSection(PostgresSection).Bind(o);
                    o.LockTimeout = timeouts.LockTimeout;
                    o.CommandTimeout = timeouts.CommandTimeout;
                    o.Database = databases.Default;
                });
                break;
            case StorageProviders.SqlServer:
                services.AddAllocatorSqlServer(storage.ConnectionString ?? "", o =>
                {
                    configuration.GetSection(SqlServerSection).Bind(o);
                    o.LockTimeout = timeouts.LockTimeout;
                    o.CommandTimeout = timeouts.CommandTimeout;
                    o.Database = databases.Default;
                });
                break;
            default:
                // An unknown provider registers nothing: StorageOptionsValidator fails the start naming it.
                return services;
        }

        return services.AddSingleDatabase(databases.Default);
    }

    /// <summary>One database: the container's store is it (no routing, no directory read).</summary>
    private static IServiceCollection AddSingleDatabase(this IServiceCollection services, string name)
    {
        services.AddSingleton(sp => Databases.Single(name, sp));
        services.AddSingleton<IPoolPlacement, SingleDatabasePlacement>();
        return services;
    }

    /// <summary>
    /// Several databases: a keyed store per database (its options from the same sections as a
    /// single store's), started by <see cref="DatabaseStartup"/>, and the routing store as the
    /// container's <see cref="IWorkerStore"/>, <see cref="IPoolChangeFeed"/> and <see cref="IPoolSettingsCache"/>.
    /// </summary>
    private static IServiceCollection AddSeveralDatabases(this IServiceCollection services, IConfiguration configuration, ConfiguredDatabases databases, string provider)
    {
        var timeouts = new AllocatorTimeoutOptions();
        configuration.GetSection(AllocatorTimeoutOptions.Section).Bind(timeouts);
        foreach (var (name, connectionString) in databases.All)
        {
            if (provider == StorageProviders.Postgres)
            {
                services.AddAllocatorPostgres(name, (_, o) =>
                {
                    configuration.GetSection(PostgresSection).Bind(o);
                    o.ConnectionString = connectionString;
                    o.LockTimeout = timeouts.LockTimeout;
                    o.CommandTimeout = timeouts.CommandTimeout;
                });
            }
            else
            {
                services.AddAllocatorSqlServer(name, (_, o) =>
                {
                    configuration.GetSection(SqlServerSection).Bind(o);
                    o.ConnectionString = connectionString;
                    o.LockTimeout = timeouts.LockTimeout;
                    o.CommandTimeout = timeouts.CommandTimeout;
                });
            }
        }

        var names = databases.All.Select(d => d.Name).ToList();
        services.AddSingleton(sp => Databases.Keyed(names, sp));
        services.AddSingleton(sp => new RoutingWorkerStore(sp.GetRequiredService<Databases>()));
        services.AddSingleton<IWorkerStore>(sp => sp.GetRequiredService<RoutingWorkerStore>());
        services.AddSingleton<IPoolChangeFeed>(sp => sp.GetRequiredService<RoutingWorkerStore>());
        services.AddSingleton<IPoolSettingsCache>(sp => sp.GetRequiredService<RoutingWorkerStore>());
        services.AddSingleton<IPoolPlacement>(sp => sp.GetRequiredService<RoutingWorkerStore>());
        services.AddSingleton<IHostedService, DatabaseStartup>();
        return services;
    }
}
