namespace Allocator.Grains;

/// <summary>
/// The grain of one pool in this service instance. It coalesces concurrent allocation requests
/// into store batches (group commit) and keeps callers that wait for capacity in memory.
/// </summary>
public interface IPoolGrain
{
    /// <summary>
    /// Allocates for one request. When the pool has no capacity, waits in memory, first come
    /// first served, up to <paramref name="maxWait"/> (bounded by the pool's own maximum wait)
    /// for a release, registration or undrain; then answers <see cref="AllocationStatus.NoCapacity"/>.
    /// </summary>
    Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default);

    /// <summary>
    /// Ends an allocation if <paramref name="epoch"/> is current, answering as
    /// <see cref="IWorkerStore.ReleaseAsync(string, Guid, long, CancellationToken)"/> would.
    /// Releases arriving together are group-committed like allocations (one store call and one
    /// commit per batch), and a batch that frees capacity wakes this instance's waiters at once,
    /// without waiting for the store's change notification.
    /// </summary>
    /// <remarks>
    /// Canceling stops the wait; a release already handed to the store may still commit.
    /// </remarks>
    Task<LeaseResult> ReleaseAsync(Guid allocationId, long epoch, CancellationToken cancellationToken = default);

    /// <summary>Callers currently waiting for capacity in this instance.</summary>
    int Waiters { get; }
}

/// <summary>Absorbs registration storms: registrations arriving together are upserted in batches.</summary>
public interface IRegistrationBatcher
{
    Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default);
}

/// <summary>Finds (activating on first use) the grains of a pool in this process.</summary>
public interface IGrainFactory
{
    IPoolGrain GetPoolGrain(string poolId);

    IRegistrationBatcher GetRegistrationBatcher(string poolId);
}
