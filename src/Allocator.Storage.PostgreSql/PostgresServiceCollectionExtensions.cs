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

    /// <summary>
    /// Registers a PostgreSQL store for one of several databases, under <paramref name="name"/>
    /// (a keyed service, issue 23): <see cref="IWorkerStore"/>, <see cref="IPoolChangeFeed"/>,
    /// <see cref="IPoolSettingsCache"/> and <see cref="IPoolPlacementStore"/>, all one singleton,
    /// resolved with <c>GetRequiredKeyedService&lt;T&gt;(name)</c>; options are the named options
    /// <paramref name="name"/>, validated when the host starts. Unlike the single-store overloads it
    /// registers no starting step: the owner of the databases calls
    /// <see cref="IPoolPlacementStore.InitializeAsync"/> and decides what a database that cannot be
    /// reached at start means (the host: ADR 0023). Any number of names per container.
    /// </summary>
    /// <param name="services">The services.</param>
    /// <param name="name">The database's name (the service key, and <see cref="PostgresWorkerStoreOptions.Database"/>).</param>
    /// <param name="configure">Sets the options from other services (configuration, timeouts).</param>
    /// <exception cref="InvalidOperationException">A store is already registered under <paramref name="name"/>.</exception>
    public static IServiceCollection AddAllocatorPostgres(this IServiceCollection services, string name, Action<IServiceProvider, PostgresWorkerStoreOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentNullException.ThrowIfNull(configure);
        if (services.Any(d => d.IsKeyedService && d.ServiceType == typeof(IWorkerStore) && Equals(d.ServiceKey, name)))
        {
            throw new InvalidOperationException($"An IWorkerStore is already registered for database '{name}'.");
        }

        services.AddOptions<PostgresWorkerStoreOptions>(name)
            .Configure<IServiceProvider>((options, sp) =>
            {
                options.LoggerFactory = sp.GetService<Microsoft.Extensions.Logging.ILoggerFactory>();
                options.Database = name;
                configure(sp, options);
            })
            .ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PostgresWorkerStoreOptions>, OptionsValidator>());
        services.AddKeyedSingleton(name, (sp, _) => new PostgresWorkerStore(sp.GetRequiredService<IOptionsMonitor<PostgresWorkerStoreOptions>>().Get(name), sp.GetService<TimeProvider>()));
        services.AddKeyedSingleton<IWorkerStore>(name, (sp, key) => sp.GetRequiredKeyedService<PostgresWorkerStore>(key));
        services.AddKeyedSingleton<IPoolChangeFeed>(name, (sp, key) => sp.GetRequiredKeyedService<PostgresWorkerStore>(key));
        services.AddKeyedSingleton<IPoolSettingsCache>(name, (sp, key) => sp.GetRequiredKeyedService<PostgresWorkerStore>(key).SettingsCache);
        services.AddKeyedSingleton<IPoolPlacementStore>(name, (sp, key) => sp.GetRequiredKeyedService<PostgresWorkerStore>(key));
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
