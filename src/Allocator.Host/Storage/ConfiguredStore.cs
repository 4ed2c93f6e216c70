using Allocator.Host.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// Registers the store named by the configuration (<c>Allocator:Storage:Provider</c>, else
/// PostgreSQL when <c>ConnectionStrings:Allocator</c> is set, else in memory) through the store's
/// own <c>Add…</c> method, unless the embedding code (tests, the load harness) registered a
/// store already: then that one serves and the configured one is never created.
/// </summary>
internal static class ConfiguredStore
{
    /// <summary>Options of each database store beyond the connection string and timeouts, e.g. <c>Allocator:Storage:Postgres:Schema</c>.</summary>
    public const string PostgresSection = AllocatorStorageOptions.Section + ":Postgres";

    /// <inheritdoc cref="PostgresSection"/>
    public const string SqlServerSection = AllocatorStorageOptions.Section + ":SqlServer";

    public static IServiceCollection AddConfiguredStore(this IServiceCollection services, IConfiguration configuration)
    {
        if (services.Any(d => d.ServiceType == typeof(IWorkerStore)))
        {
            return services;
        }

        var storage = new AllocatorStorageOptions();
        configuration.GetSection(AllocatorStorageOptions.Section).Bind(storage);
        storage.ConnectionString ??= configuration.GetConnectionString("Allocator");

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
                });
                break;
            case StorageProviders.SqlServer:
                services.AddAllocatorSqlServer(storage.ConnectionString ?? "", o =>
                {
                    configuration.GetSection(SqlServerSection).Bind(o);
                    o.LockTimeout = timeouts.LockTimeout;
                    o.CommandTimeout = timeouts.CommandTimeout;
                });
                break;
            default:
                // An unknown provider registers nothing: StorageOptionsValidator fails the start naming it.
                break;
        }

        return services;
    }
}
