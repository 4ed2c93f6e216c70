using Allocator;
using Allocator.Storage.PostgreSql;
using Allocator.Storage.PostgreSql.Internal;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Options;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers the PostgreSQL store, the way Npgsql registers its data source.</summary>
/// <example>
/// <code>
/// builder.Services.AddAllocatorPostgres(builder.Configuration.GetConnectionString("Allocator")!,
///     o => o.LockTimeout = TimeSpan.FromSeconds(2));
/// </code>
/// </example>
public static class PostgresServiceCollectionExtensions
{
    /// <summary>
    /// Registers <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on PostgreSQL. The
    /// options are validated when the host starts; the migrations run and the LISTEN connection
    /// opens before anything else starts (an <see cref="IHostedLifecycleService"/> starting
    /// step), so a server that cannot be reached fails start-up with an
    /// <see cref="InvalidOperationException"/> naming <see cref="PostgresWorkerStoreOptions.ConnectionStringSetting"/>.
    /// </summary>
    /// <exception cref="InvalidOperationException">A store is already registered.</exception>
    public static IServiceCollection AddAllocatorPostgres(this IServiceCollection services, string connectionString, Action<PostgresWorkerStoreOptions>? configure = null) =>
        services.AddAllocatorPostgres((_, options) =>
        {
            options.ConnectionString = connectionString;
            configure?.Invoke(options);
        });

    /// <inheritdoc cref="AddAllocatorPostgres(IServiceCollection, string, Action{PostgresWorkerStoreOptions}?)"/>
    /// <param name="services">The services.</param>
    /// <param name="configure">Sets the options from other services (configuration, timeouts, a registered data source).</param>
    public static IServiceCollection AddAllocatorPostgres(this IServiceCollection services, Action<IServiceProvider, PostgresWorkerStoreOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);
        if (services.Any(d => d.ServiceType == typeof(IWorkerStore)))
        {
            throw new InvalidOperationException("An IWorkerStore is already registered; register one store per container.");
        }

        services.AddOptions<PostgresWorkerStoreOptions>()
            .Configure<IServiceProvider>((options, sp) =>
            {
                options.LoggerFactory = sp.GetService<Microsoft.Extensions.Logging.ILoggerFactory>();
                configure(sp, options);
            })
            .ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PostgresWorkerStoreOptions>, OptionsValidator>());
        services.AddSingleton(sp => new PostgresWorkerStore(sp.GetRequiredService<IOptions<PostgresWorkerStoreOptions>>().Value, sp.GetService<TimeProvider>()));
        services.AddSingleton<IWorkerStore>(sp => sp.GetRequiredService<PostgresWorkerStore>());
        services.AddSingleton<IPoolChangeFeed>(sp => sp.GetRequiredService<PostgresWorkerStore>());
        services.AddSingleton<IPoolSettingsCache>(sp => sp.GetRequiredService<PostgresWorkerStore>().SettingsCache);
        services.AddSingleton<IHostedService, Startup>();
        return services;
    }

    private sealed class OptionsValidator : IValidateOptions<PostgresWorkerStoreOptions>
    {
        public ValidateOptionsResult Validate(string? name, PostgresWorkerStoreOptions options) =>
            options.Validate() is { Count: > 0 } errors ? ValidateOptionsResult.Fail(errors) : ValidateOptionsResult.Success;
    }

    /// <summary>Migrates and starts listening in the host's starting step, before any other service starts (Kestrel, the silo).</summary>
    private sealed class Startup(PostgresWorkerStore store) : IHostedLifecycleService
    {
        public async Task StartingAsync(CancellationToken cancellationToken)
        {
            try
            {
                await store.InitializeAsync(cancellationToken);
            }
            catch (Exception ex) when (ex is not OperationCanceledException)
            {
                // Name the setting to fix, never the connection string itself (it may hold a password).
                throw new InvalidOperationException(
                    $"Cannot start the PostgreSQL store configured by {PostgresWorkerStoreOptions.ConnectionStringSetting}: {ex.Message}", ex);
            }
        }

        public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StoppingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;
    }
}
