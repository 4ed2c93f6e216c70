using Allocator.Grains;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Allocates through the pool grain, so concurrent callers are coalesced into store batches
/// (group commit) exactly as the service does; releases go through the grain too and are
/// batched the same way, and registrations go through the pool's registration batcher.
/// </summary>
internal sealed class PoolGrainDriver(IWorkerStore store) : IAllocationDriver
{
    private readonly GrainFactory _grains = new(store, ChangeFeed.Of(store), TimeProvider.System, new GrainOptions());

    public string Name => "pool grain";

    public Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        _grains.GetPoolGrain(poolId).AllocateAsync(request, TimeSpan.Zero, cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        _grains.GetPoolGrain(poolId).ReleaseAsync(allocationId, epoch, cancellationToken);

    /// <summary>Through the pool's registration batcher, which upserts registrations arriving together in one statement.</summary>
    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        _grains.GetRegistrationBatcher(poolId).RegisterAsync(registration, cancellationToken);

    public ValueTask DisposeAsync() => _grains.DisposeAsync();
}
