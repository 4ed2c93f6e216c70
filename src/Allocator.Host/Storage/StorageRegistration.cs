using Allocator.Host.Options;
using Allocator.InMemory;
using Allocator.Storage.PostgreSql;
using Allocator.Storage.SqlServer;
using Microsoft.Extensions.Options;
using Npgsql;

namespace Allocator.Host.Storage;

/// <summary>
/// The one place that turns <see cref="AllocatorStorageOptions"/> into an <see cref="IWorkerStore"/>.
/// The store is created (and a database store migrated) asynchronously when the host starts,
/// before the server listens; <see cref="IWorkerStore"/> resolves to it from then on.
/// </summary>
internal static partial class StorageRegistration
{
    private static readonly Func<IServiceProvider, IWorkerStore> ConfiguredStore = sp => sp.GetRequiredService<StoreLifetime>().Store;
    private static readonly Func<IServiceProvider, IHostedService> CreateConfiguredStore = sp => sp.GetRequiredService<StoreLifetime>();

    public static IServiceCollection AddAllocatorStore(this IServiceCollection services)
    {
        services.AddSingleton<StoreLifetime>();
        services.AddSingleton(CreateConfiguredStore);
        services.AddSingleton(ConfiguredStore);
        return services;
    }

    /// <summary>
    /// When a store was registered after ours (tests, the load harness), that store serves and
    /// the configured one is never created: no idle in-memory store, no misleading start-up log.
    /// </summary>
    public static void DropConfiguredStoreIfReplaced(IServiceCollection services)
    {
        var effective = services.LastOrDefault(d => d.ServiceType == typeof(IWorkerStore));
        if (effective is null || ReferenceEquals(effective.ImplementationFactory, ConfiguredStore))
        {
            return;
        }

        for (var i = services.Count - 1; i >= 0; i--)
        {
            var d = services[i];
            if (d.ServiceType == typeof(StoreLifetime)
                || ReferenceEquals(d.ImplementationFactory, CreateConfiguredStore)
                || ReferenceEquals(d.ImplementationFactory, ConfiguredStore))
            {
                services.RemoveAt(i);
            }
        }
    }

    /// <summary>One line per provider.</summary>
    /// <param name="dataSource">Receives the Npgsql data source built for a PostgreSQL store, which the caller disposes after the store.</param>
    internal static Task<IWorkerStore> CreateStoreAsync(
        AllocatorStorageOptions storage, AllocatorTimeoutOptions timeouts, TimeProvider time, ILoggerFactory loggerFactory, Action<NpgsqlDataSource> dataSource, CancellationToken cancellationToken) =>
        storage.EffectiveProvider switch
        {
            StorageProviders.Memory => Task.FromResult<IWorkerStore>(new InMemoryWorkerStore(time, new InMemoryWorkerStoreOptions { LockTimeout = timeouts.LockTimeout })),

            StorageProviders.Postgres => CreatePostgresAsync(storage, timeouts, time, loggerFactory, dataSource, cancellationToken),
            StorageProviders.SqlServer => SqlServerWorkerStoreFactory.CreateAsync(
                new SqlServerWorkerStoreOptions { ConnectionString = storage.ConnectionString!, LockTimeout = timeouts.LockTimeout, CommandTimeout = timeouts.CommandTimeout },
                time, cancellationToken),
            var provider => throw new InvalidOperationException(
                $"Storage provider '{provider}' is not available in this build of the host. Remove ConnectionStrings:Allocator / Allocator:Storage:Provider to run on the in-memory store."),
        };

    /// <summary>
    /// The PostgreSQL store on a data source that logs through the host's logger factory (so
    /// Npgsql's own log lines reach the console and OTLP with the rest). As the store's own
    /// data source does, a returned connection is not reset (<c>No Reset On Close</c>) unless the
    /// connection string says otherwise: <c>DISCARD ALL</c> would drop the store's cached plans.
    /// </summary>
    private static async Task<IWorkerStore> CreatePostgresAsync(
        AllocatorStorageOptions storage, AllocatorTimeoutOptions timeouts, TimeProvider time, ILoggerFactory loggerFactory, Action<NpgsqlDataSource> dataSource, CancellationToken cancellationToken)
    {
        var builder = new NpgsqlDataSourceBuilder(storage.ConnectionString);
        var given = new System.Data.Common.DbConnectionStringBuilder { ConnectionString = storage.ConnectionString };
        if (!given.ContainsKey("No Reset On Close") && !given.ContainsKey("NoResetOnClose"))
        {
            builder.ConnectionStringBuilder.NoResetOnClose = true;
        }

        var source = builder.UseLoggerFactory(loggerFactory).Build();
        try
        {
            var store = await PostgresWorkerStoreFactory.CreateAsync(
                source,
                new PostgresWorkerStoreOptions { LockTimeout = timeouts.LockTimeout, CommandTimeout = timeouts.CommandTimeout, TimeProvider = time },
                cancellationToken);
            dataSource(source);
            return store;
        }
        catch
        {
            await source.DisposeAsync();
            throw;
        }
    }

    /// <summary>Creates the store before anything else starts (the container disposes it).</summary>
    internal sealed partial class StoreLifetime(
        IOptions<AllocatorStorageOptions> storage,
        IOptions<AllocatorTimeoutOptions> timeouts,
        TimeProvider time,
        ILoggerFactory loggerFactory,
        ILogger<StoreLifetime> logger) : IHostedLifecycleService, IAsyncDisposable
    {
        private IWorkerStore? _store;
        private NpgsqlDataSource? _dataSource;

        public IWorkerStore Store => _store ?? throw new InvalidOperationException("The store is created when the host starts; it is not available before.");

        public async Task StartingAsync(CancellationToken cancellationToken)
        {
            try
            {
                _store = await CreateStoreAsync(storage.Value, timeouts.Value, time, loggerFactory, source => _dataSource = source, cancellationToken);
            }
            catch (Exception ex) when (ex is not (OperationCanceledException or InvalidOperationException))
            {
                // Name the setting to fix, never the connection string itself (it may hold a password).
                throw new InvalidOperationException(
                    $"Cannot start the '{storage.Value.EffectiveProvider}' store configured by ConnectionStrings:Allocator (Allocator:Storage): {ex.Message}", ex);
            }

            if (_store.Name == StorageProviders.Memory)
            {
                LogInMemory(logger);
            }
            else
            {
                LogStore(logger, _store.Name);
            }
        }

        public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StoppingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        // The container disposes the store (it was created through a factory registration),
        // after the grains that were created on top of it; disposing here too would do it twice.
        public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        // The container disposes singletons in reverse order of creation: the store (resolved
        // through this object, so created after it) first, then this, then the data source.
        public ValueTask DisposeAsync() => _dataSource?.DisposeAsync() ?? ValueTask.CompletedTask;

        [LoggerMessage(Level = LogLevel.Warning, Message = "No database configured (ConnectionStrings:Allocator is empty): running on the IN-MEMORY store. Nothing survives a restart and instances do not share state.")]
        private static partial void LogInMemory(ILogger logger);

        [LoggerMessage(Level = LogLevel.Information, Message = "Using the {Store} store.")]
        private static partial void LogStore(ILogger logger, string store);
    }
}
