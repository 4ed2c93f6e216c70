using System.Collections.Concurrent;
using Allocator.Grains;
using Allocator.Host.Options;
using Allocator.Telemetry;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Storage;

/// <summary>
/// TEMPORARY stand-in for the grain runtime until Allocator.Grains is merged: each allocate is a
/// one-request store batch with no coalescing and no waiting (a full pool answers no-capacity at
/// once), and each registration is a one-worker batch. Like the real grains, a call that outlives
/// <see cref="AllocatorTimeoutOptions.GrainCallTimeout"/> fails with <see cref="AllocatorErrorKind.Unavailable"/>. The integrator replaces the registration
/// of this class with the real grain factory (see <c>AllocatorApp.AddAllocatorServices</c>).
/// </summary>
internal sealed class DirectGrainFactory(IWorkerStore store, IOptions<AllocatorTimeoutOptions> timeouts) : IGrainFactory
{
    private readonly TimeSpan _callTimeout = timeouts.Value.GrainCallTimeout;

    private readonly ConcurrentDictionary<string, DirectPoolGrain> _pools = new(StringComparer.Ordinal);

    public IPoolGrain GetPoolGrain(string poolId) => _pools.GetOrAdd(poolId, id => new DirectPoolGrain(store, id, _callTimeout));

    public IRegistrationBatcher GetRegistrationBatcher(string poolId) => new DirectRegistrationBatcher(store, poolId);

    private sealed class DirectPoolGrain(IWorkerStore store, string poolId, TimeSpan callTimeout) : IPoolGrain
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

            using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            deadline.CancelAfter(callTimeout + maxWait);
            try
            {
                var outcomes = await store.AllocateAsync(poolId, [request], deadline.Token);
                return outcomes[0];
            }
            catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
            {
                throw new AllocatorException(AllocatorErrorKind.Unavailable, "The grain call timed out.");
            }
        }
    }

    private sealed class DirectRegistrationBatcher(IWorkerStore store, string poolId) : IRegistrationBatcher
    {
        public async Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default) =>
            (await store.RegisterWorkersAsync(poolId, [registration], cancellationToken))[0];
    }
}
