using System.Collections.Concurrent;
using Allocator.Grains;
using Allocator.Telemetry;

namespace Allocator.Host.Storage;

/// <summary>
/// TEMPORARY stand-in for the grain runtime until Allocator.Grains is merged: each allocate is a
/// one-request store batch with no coalescing and no waiting (a full pool answers no-capacity at
/// once), and each registration is a one-worker batch. The integrator replaces the registration
/// of this class with the real grain factory (see <c>AllocatorApp.AddAllocatorServices</c>).
/// </summary>
internal sealed class DirectGrainFactory(IWorkerStore store) : IGrainFactory
{
    private readonly ConcurrentDictionary<string, DirectPoolGrain> _pools = new(StringComparer.Ordinal);

    public IPoolGrain GetPoolGrain(string poolId) => _pools.GetOrAdd(poolId, id => new DirectPoolGrain(store, id));

    public IRegistrationBatcher GetRegistrationBatcher(string poolId) => new DirectRegistrationBatcher(store, poolId);

    private sealed class DirectPoolGrain(IWorkerStore store, string poolId) : IPoolGrain
    {
        public int Waiters => 0;

        public async Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default)
        {
            using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.batch");
            activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
            activity?.SetTag(AllocatorTelemetry.Tags.Store, store.Name);
            activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, 1);
            activity?.SetTag(AllocatorTelemetry.Tags.QueueWaitMs, 0);
            if (activity is { IsAllDataRequested: true } && await store.GetPoolAsync(poolId, cancellationToken) is { } pool)
            {
                activity.SetTag(AllocatorTelemetry.Tags.Strategy, pool.Settings.Strategy.ToName());
            }

            var outcomes = await store.AllocateAsync(poolId, [request], cancellationToken);
            return outcomes[0];
        }
    }

    private sealed class DirectRegistrationBatcher(IWorkerStore store, string poolId) : IRegistrationBatcher
    {
        public async Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default) =>
            (await store.RegisterWorkersAsync(poolId, [registration], cancellationToken))[0];
    }
}
