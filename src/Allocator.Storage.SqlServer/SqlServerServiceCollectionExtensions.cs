using Allocator;
using Allocator.Storage.SqlServer;
using Allocator.Storage.SqlServer.Internal;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Options;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers the SQL Server store.</summary>
/// <example>
/// <code>
/// builder.Services.AddAllocatorSqlServer(builder.Configuration.GetConnectionString("Allocator")!);
/// </code>
/// </example>
public static class SqlServerServiceCollectionExtensions
{
    /// <summary>
    /// Registers <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on SQL Server. The
    /// options are validated when the host starts; the first connection and the migrations run
    /// before anything else starts (an <see cref="IHostedLifecycleService"/> starting step), so a
    /// server that cannot be reached fails start-up with an <see cref="InvalidOperationException"/>
    /// naming <see cref="SqlServerWorkerStoreOptions.ConnectionStringSetting"/>.
    /// </summary>
    /// <exception cref="InvalidOperationException">A store is already registered.</exception>
    public static IServiceCollection AddAllocatorSqlServer(this IServiceCollection services, string connectionString, Action<SqlServerWorkerStoreOptions>? configure = null) =>
        services.AddAllocatorSqlServer((_, options) =>
        {
            options.ConnectionString = connectionString;
            configure?.Invoke(options);
        });

    /// <inheritdoc cref="AddAllocatorSqlServer(IServiceCollection, string, Action{SqlServerWorkerStoreOptions}?)"/>
    /// <param name="services">The services.</param>
    /// <param name="configure">Sets the options from other services (configuration, timeouts).</param>
    public static IServiceCollection AddAllocatorSqlServer(this IServiceCollection services, Action<IServiceProvider, SqlServerWorkerStoreOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);
        if (services.Any(d => d.ServiceType == typeof(IWorkerStore)))
        {
            throw new InvalidOperationException("An IWorkerStore is already registered; register one store per container.");
        }

        services.AddOptions<SqlServerWorkerStoreOptions>().Configure<IServiceProvider>((options, sp) => configure(sp, options)).ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<SqlServerWorkerStoreOptions>, OptionsValidator>());
        services.AddSingleton(sp => new SqlServerWorkerStore(sp.GetRequiredService<IOptions<SqlServerWorkerStoreOptions>>().Value, sp.GetService<TimeProvider>()));
        services.AddSingleton<IWorkerStore>(sp => sp.GetRequiredService<SqlServerWorkerStore>());
        services.AddSingleton<IPoolChangeFeed>(sp => sp.GetRequiredService<SqlServerWorkerStore>());
        services.AddSingleton<IPoolSettingsCache>(sp => sp.GetRequiredService<SqlServerWorkerStore>().SettingsCache);
        services.AddSingleton<IHostedService, Startup>();
        return services;
    }

    /// <summary>
    /// Registers a SQL Server store for one of several databases, under <paramref name="name"/>
    /// (a keyed service, issue 23): <see cref="IWorkerStore"/>, <see cref="IPoolChangeFeed"/>,
    /// <see cref="IPoolSettingsCache"/> and <see cref="IPoolPlacementStore"/>, all one singleton;
    /// options are the named options <paramref name="name"/>, validated when the host starts. No
    /// starting step: the owner of the databases calls <see cref="IPoolPlacementStore.InitializeAsync"/>
    /// (the host: ADR 0023). Any number of names per container.
    /// </summary>
    /// <param name="services">The services.</param>
    /// <param name="name">The database's name (the service key, and <see cref="SqlServerWorkerStoreOptions.Database"/>).</param>
    /// <param name="configure">Sets the options from other services (configuration, timeouts).</param>
    /// <exception cref="InvalidOperationException">A store is already registered under <paramref name="name"/>.</exception>
    public static IServiceCollection AddAllocatorSqlServer(this IServiceCollection services, string name, Action<IServiceProvider, SqlServerWorkerStoreOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentNullException.ThrowIfNull(configure);
        if (services.Any(d => d.IsKeyedService && d.ServiceType == typeof(IWorkerStore) && Equals(d.ServiceKey, name)))
        {
            throw new InvalidOperationException($"An IWorkerStore is already registered for database '{name}'.");
        }

        services.AddOptions<SqlServerWorkerStoreOptions>(name).Configure<IServiceProvider>((options, sp) =>
        {
            options.Database = name;
            configure(sp, options);
        }).ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<SqlServerWorkerStoreOptions>, OptionsValidator>());
        services.AddKeyedSingleton(name, (sp, _) => new SqlServerWorkerStore(sp.GetRequiredService<IOptionsMonitor<SqlServerWorkerStoreOptions>>().Get(name), sp.GetService<TimeProvider>()));
        services.AddKeyedSingleton<IWorkerStore>(name, (sp, key) => sp.GetRequiredKeyedService<SqlServerWorkerStore>(key));
        services.AddKeyedSingleton<IPoolChangeFeed>(name, (sp, key) => sp.GetRequiredKeyedService<SqlServerWorkerStore>(key));
        services.AddKeyedSingleton<IPoolSettingsCache>(name, (sp, key) => sp.GetRequiredKeyedService<SqlServerWorkerStore>(key).SettingsCache);
        services.AddKeyedSingleton<IPoolPlacementStore>(name, (sp, key) => sp.GetRequiredKeyedService<SqlServerWorkerStore>(key));
        return services;
    }

    private sealed class OptionsValidator : IValidateOptions<SqlServerWorkerStoreOptions>
    {
        public ValidateOptionsResult Validate(string? name, SqlServerWorkerStoreOptions options) =>
            options.Validate() is { Count: > 0 } errors ? ValidateOptionsResult.Fail(errors) : ValidateOptionsResult.Success;
    }

    /// <summary>Connects and migrates in the host's starting step, before any other service starts (Kestrel, the silo).</summary>
    private sealed class Startup(SqlServerWorkerStore store) : IHostedLifecycleService
    {
        public Task StartingAsync(CancellationToken cancellationToken) => store.InitializeAsync(cancellationToken);

        public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StoppingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;
    }
}
