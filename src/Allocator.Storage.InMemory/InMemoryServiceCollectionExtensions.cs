using Allocator;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Options;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers the in-memory reference store.</summary>
public static class InMemoryServiceCollectionExtensions
{
    /// <summary>
    /// Registers <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> in process memory
    /// (nothing survives a restart; instances do not share state). Its clock is the registered
    /// <see cref="TimeProvider"/>, else the system clock. Options are validated when the host starts.
    /// </summary>
    /// <exception cref="InvalidOperationException">A store is already registered.</exception>
    public static IServiceCollection AddAllocatorInMemory(this IServiceCollection services, Action<InMemoryWorkerStoreOptions>? configure = null) =>
        services.AddAllocatorInMemory((_, options) => configure?.Invoke(options));

    /// <inheritdoc cref="AddAllocatorInMemory(IServiceCollection, Action{InMemoryWorkerStoreOptions}?)"/>
    /// <param name="services">The services.</param>
    /// <param name="configure">Sets the options from other services (e.g. the configured lock timeout).</param>
    public static IServiceCollection AddAllocatorInMemory(this IServiceCollection services, Action<IServiceProvider, InMemoryWorkerStoreOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);
        if (services.Any(d => d.ServiceType == typeof(IWorkerStore)))
        {
            throw new InvalidOperationException("An IWorkerStore is already registered; register one store per container.");
        }

        services.AddOptions<InMemoryWorkerStoreOptions>().Configure<IServiceProvider>((options, sp) => configure(sp, options)).ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<InMemoryWorkerStoreOptions>, OptionsValidator>());
        services.AddSingleton(sp => new InMemoryWorkerStore(sp.GetService<TimeProvider>(), sp.GetRequiredService<IOptions<InMemoryWorkerStoreOptions>>().Value));
        services.AddSingleton<IWorkerStore>(sp => sp.GetRequiredService<InMemoryWorkerStore>());
        services.AddSingleton<IPoolChangeFeed>(sp => sp.GetRequiredService<InMemoryWorkerStore>());
        services.AddSingleton<IPoolSettingsCache>(sp => sp.GetRequiredService<InMemoryWorkerStore>());
        return services;
    }

    private sealed class OptionsValidator : IValidateOptions<InMemoryWorkerStoreOptions>
    {
        public ValidateOptionsResult Validate(string? name, InMemoryWorkerStoreOptions options) =>
            options.Validate() is { Count: > 0 } errors ? ValidateOptionsResult.Fail(errors) : ValidateOptionsResult.Success;
    }
}
