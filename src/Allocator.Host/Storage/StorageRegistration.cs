using Allocator.Host.Options;
using Allocator.InMemory;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>The one place that turns <see cref="AllocatorStorageOptions"/> into an <see cref="IWorkerStore"/>.</summary>
internal static partial class StorageRegistration
{
    public static IServiceCollection AddAllocatorStore(this IServiceCollection services)
    {
        services.AddSingleton<IWorkerStore>(sp =>
        {
            var storage = sp.GetRequiredService<IOptions<AllocatorStorageOptions>>().Value;
            var timeouts = sp.GetRequiredService<IOptions<AllocatorTimeoutOptions>>().Value;
            var time = sp.GetRequiredService<TimeProvider>();
            var logger = sp.GetRequiredService<ILoggerFactory>().CreateLogger(typeof(StorageRegistration));
            IWorkerStore store = storage.EffectiveProvider switch
            {
                StorageProviders.Memory => new InMemoryWorkerStore(time, new InMemoryWorkerStoreOptions { LockTimeout = timeouts.LockTimeout }),

                // INTEGRATOR: one line per provider, e.g.
                // StorageProviders.Postgres => PostgreSqlWorkerStore.Create(storage.ConnectionString!, timeouts.LockTimeout, timeouts.CommandTimeout, time),
                var provider => throw new InvalidOperationException(
                    $"Storage provider '{provider}' is not available in this build of the host. Remove ConnectionStrings:Allocator / Allocator:Storage:Provider to run on the in-memory store."),
            };
            if (store.Name == StorageProviders.Memory)
            {
                LogInMemory(logger);
            }
            else
            {
                LogStore(logger, store.Name);
            }

            return store;
        });
        return services;
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "No database configured (ConnectionStrings:Allocator is empty): running on the IN-MEMORY store. Nothing survives a restart and instances do not share state.")]
    private static partial void LogInMemory(ILogger logger);

    [LoggerMessage(Level = LogLevel.Information, Message = "Using the {Store} store.")]
    private static partial void LogStore(ILogger logger, string store);
}
