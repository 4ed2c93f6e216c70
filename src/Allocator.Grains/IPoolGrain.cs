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
