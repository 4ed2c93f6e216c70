using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Options;
using Orleans.Configuration;
using Orleans.Serialization.Configuration;

namespace Allocator.Grains;

/// <summary>Adds Allocator's grains to an Orleans silo.</summary>
public static class AllocatorGrainsHosting
{
    /// <summary>
    /// How long a stopping silo keeps its messaging up after its grains have deactivated, so that
    /// the answers they sent last, and the calls they forwarded to their next activation, are
    /// answered before the cluster learns the silo is gone (Orleans'
    /// <c>SiloMessagingOptions.WaitForMessageToBeQueuedForOutboundTime</c>, at least this).
    /// </summary>
    public static readonly TimeSpan StopGrace = TimeSpan.FromSeconds(1);

    /// <summary>
    /// Adds the pool grain and the registration batcher (found by Orleans' code generation) and
    /// their options, and sets the Orleans options they rely on: idle collection from
    /// <see cref="GrainOptions.IdleTimeout"/>, the response timeout from
    /// <see cref="GrainOptions.CallTimeout"/> with requests canceled in the grain when it passes,
    /// serializer analysis at start (a type in a grain signature without a serializer fails
    /// the silo's start, not a call in production). Trace propagation across grain calls is the
    /// host's choice (<c>silo.AddActivityPropagation()</c> when traces are collected): its grain
    /// call filters cost every call, traced or not.
    /// The grains take <see cref="IWorkerStore"/>, <see cref="IPoolChangeFeed"/>,
    /// <see cref="IPoolSettingsCache"/> and <see cref="TimeProvider"/> from the container (the
    /// store's <c>AddAllocator…</c> method registers the first three). When no settings cache is
    /// registered, one over the store's pool reads and change feed is used.
    /// </summary>
    public static ISiloBuilder AddAllocatorGrains(this ISiloBuilder silo, Action<GrainOptions>? configure = null)
    {
        ArgumentNullException.ThrowIfNull(silo);
        var options = silo.Services.AddOptions<GrainOptions>();
        if (configure is not null)
        {
            options.Configure(configure);
        }

        options.ValidateOnStart();
        silo.Services.AddSingleton<IValidateOptions<GrainOptions>, GrainOptionsValidator>();
        silo.Services.AddOptions<GrainCollectionOptions>().Configure<IOptions<GrainOptions>>((collection, grains) =>
        {
            collection.CollectionAge = grains.Value.IdleTimeout;

            // A stopping pool grain waits for its batches in the store (each ends within about a
            // grain call timeout: its requests' deadlines, then one statement's command timeout)
            // and then for the releases it sends itself; past this Orleans stops waiting, and the
            // grain leaves to their leases what it would have released (issue 39, #4).
            var handOver = grains.Value.CallTimeout * 2;
            if (collection.DeactivationTimeout < handOver)
            {
                collection.DeactivationTimeout = handOver;
            }

            if (collection.CollectionQuantum >= grains.Value.IdleTimeout)
            {
                collection.CollectionQuantum = grains.Value.IdleTimeout / 2;
            }
        });
        silo.Services.AddOptions<SiloMessagingOptions>().Configure<IOptions<GrainOptions>>((messaging, grains) =>
        {
            messaging.ResponseTimeout = grains.Value.CallTimeout;
            messaging.CancelRequestOnTimeout = true;

            // A canceled caller waits for the grain's answer to the cancellation: either the
            // outcome (it had committed) or the grain's word that it took responsibility (nothing
            // written, or released). Without this the caller could hear "canceled" while its
            // allocation committed a moment later.
            messaging.WaitForCancellationAcknowledgement = true;

            // A stopping silo waits this long after its grains have deactivated (a pool grain:
            // answered the batches it had in the store, moved, and forwarded the calls that
            // waited for it) before it leaves the cluster. Other silos break their calls
            // outstanding to a silo the moment they learn it is dead, even calls whose answer is
            // on its way or that it forwarded elsewhere (Orleans' default: no wait).
            if (messaging.WaitForMessageToBeQueuedForOutboundTime < StopGrace)
            {
                messaging.WaitForMessageToBeQueuedForOutboundTime = StopGrace;
            }
        });
        silo.Services.Configure<GrainVersioningOptions>(versioning =>
        {
            // Two adjacent releases share a cluster during an upgrade (ADR 0026). A release that adds
            // a grain method raises the interface's [Version]: an activation of the newer version
            // serves both, one of the older version is deactivated by the first newer call and
            // placed again, and new activations go to the newest silos at once, so a pool's grain
            // moves once per upgrade rather than back and forth.
            versioning.DefaultCompatibilityStrategy = nameof(Orleans.Versions.Compatibility.BackwardCompatible);
            versioning.DefaultVersionSelectorStrategy = nameof(Orleans.Versions.Selector.LatestVersion);
        });
        silo.Services.Configure<TypeManifestOptions>(o => o.EnableConfigurationAnalysis = true);
        LocalPoolGrains.AddTo(silo.Services);
        silo.Services.TryAddSingleton<PoolGrainCaller>();
        silo.Services.TryAddTimeProvider();
        silo.Services.TryAddSingleton<ShortDelays>();
        silo.Services.TryAddSingleton(sp => new StoreBatchSlots(StoreBatchSlots.CountFor(
            sp.GetRequiredService<IOptions<GrainOptions>>().Value.MaxStoreBatchesInFlight,
            sp.GetRequiredService<IWorkerStore>().ConnectionLimit), sp.GetService<TimeProvider>()));
        silo.Services.TryAddSingleton<IPoolSettingsCache>(sp => new PoolSettingsCache(
            async (pool, ct) => (await sp.GetRequiredService<IWorkerStore>().GetPoolAsync(pool, ct))?.Settings,
            sp.GetRequiredService<IPoolChangeFeed>(),
            TimeSpan.FromSeconds(1),
            sp.GetService<TimeProvider>()));
        return silo;
    }

    /// <summary>The grain of a pool (one activation cluster-wide), after checking the pool id.</summary>
    /// <exception cref="ArgumentException">The pool id is not a valid id.</exception>
    public static IPoolGrain GetPoolGrain(this IGrainFactory grains, string poolId)
    {
        ArgumentNullException.ThrowIfNull(grains);
        AllocatorValidation.EnsurePoolId(poolId);
        return grains.GetGrain<IPoolGrain>(poolId);
    }

    /// <summary>The registration batcher of a pool in this silo, after checking the pool id.</summary>
    /// <exception cref="ArgumentException">The pool id is not a valid id.</exception>
    public static IRegistrationBatcherGrain GetRegistrationBatcher(this IGrainFactory grains, string poolId)
    {
        ArgumentNullException.ThrowIfNull(grains);
        AllocatorValidation.EnsurePoolId(poolId);
        return grains.GetGrain<IRegistrationBatcherGrain>(poolId);
    }

    private static void TryAddTimeProvider(this IServiceCollection services)
    {
        if (!services.Any(d => d.ServiceType == typeof(TimeProvider)))
        {
            services.AddSingleton(TimeProvider.System);
        }
    }

    private sealed class GrainOptionsValidator : IValidateOptions<GrainOptions>
    {
        public ValidateOptionsResult Validate(string? name, GrainOptions options) =>
            options.Validate() is { Count: > 0 } errors
                ? ValidateOptionsResult.Fail(errors.Select(e => $"{GrainOptions.Section}: {e}"))
                : ValidateOptionsResult.Success;
    }
}
