using Orleans.Concurrency;

namespace Allocator.Grains;

/// <summary>
/// The grain of one pool, one activation in the whole cluster: every instance's allocate and
/// release calls for the pool meet here, are coalesced into store batches (group commit), and
/// callers waiting for capacity queue here, first come first served across the cluster.
/// </summary>
/// <remarks>
/// Wire identities (ADR 0026): each method's <c>[Alias]</c> pins the id Orleans derived from its
/// signature in 0.9.0, so a silo of either release resolves the other's calls. A shipped method is
/// never changed or removed; a new method gets a new alias, the interface a higher
/// <c>[Version]</c>, and both go to src/Allocator.Grains/WireContract.Unshipped.txt.
/// </remarks>
public interface IPoolGrain : IGrainWithStringKey
{
    /// <summary>
    /// Allocates for one request. When the pool has no capacity, waits in memory up to
    /// <paramref name="maxWait"/> (bounded by the pool's own maximum wait) for a release,
    /// registration or undrain; then answers <see cref="AllocationStatus.NoCapacity"/>.
    /// </summary>
    /// <remarks>
    /// The call's own deadline is <paramref name="maxWait"/> plus the grain call timeout
    /// (<c>Allocator:Timeouts:GrainCallTimeout</c>); the caller's <paramref name="cancellationToken"/>
    /// reaches the grain. A caller that gives up while its request is queued takes nothing; one
    /// that gives up after its allocation committed has it released by the grain. The response
    /// timeout below is only a backstop above the longest wait allowed.
    /// </remarks>
    [ResponseTimeout("00:20:00")]
    [Alias("8CED4BA9")]
    Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default);

    /// <summary>
    /// Ends an allocation if <paramref name="epoch"/> is current, answering as
    /// <see cref="IWorkerStore.ReleaseAsync(string, Guid, long, CancellationToken)"/> would. With an
    /// <paramref name="owner"/>, another owner's allocation is answered <see cref="LeaseStatus.NotFound"/>
    /// as a missing one (<see cref="LeaseRelease.Owner"/>).
    /// Releases arriving together are group-committed like allocations, and a batch that freed
    /// capacity wakes this pool's waiters at once.
    /// </summary>
    /// <remarks>Canceling stops the wait; a release already handed to the store may still commit.</remarks>
    [Alias("B489C659")]
    Task<LeaseResult> ReleaseAsync(Guid allocationId, long epoch, string? owner = null, CancellationToken cancellationToken = default);

    /// <summary>
    /// The caller of <paramref name="allocation"/>, which this grain answered
    /// <see cref="AllocationStatus.Allocated"/> for <paramref name="request"/>, is known to have left
    /// before it heard the answer (its HTTP connection closed meanwhile): the grain releases the
    /// allocation, unless a request for the same key is queued, waiting, in the store, or was
    /// answered the allocation since (that caller holds it now). True when the release was started.
    /// </summary>
    /// <remarks>
    /// One activation's view, as for a caller that gives up in the store: a retry answered by
    /// another activation of the pool (a duplicate during a membership change) is not seen, and a
    /// release that fails leaves the allocation to its lease.
    /// </remarks>
    [Alias("EC526BE7")]
    Task<bool> AbandonAsync(AllocationRequest request, Allocation allocation);

    /// <summary>
    /// News that capacity may have been freed through a path that bypassed this grain (a
    /// registration batch): waiters are woken. One-way: the sender does not wait.
    /// </summary>
    [OneWay]
    [AlwaysInterleave]
    [Alias("E934B03E")]
    Task OnCapacityChangedAsync();

    /// <summary>News that the pool's settings changed: they are read again. One-way.</summary>
    [OneWay]
    [AlwaysInterleave]
    [Alias("1657CCDF")]
    Task OnSettingsChangedAsync();

    /// <summary>What the grain holds now: callers waiting for capacity, requests queued and batches in flight.</summary>
    [AlwaysInterleave]
    [Alias("78E2DE68")]
    Task<PoolGrainStatus> GetStatusAsync();
}

/// <summary>
/// The pool grain's side of preferred pools (ADR 0036), a grain interface of its own, implemented by
/// the same grain (<c>allocator-pool</c>): <see cref="IPoolGrain"/> is left exactly as 1.0.0 has it,
/// so a rolling upgrade or rollback moves no pool grain it did not move before. Only a request
/// naming several pools calls it; in a cluster that still has a 1.0.0 instance, a call to a pool
/// grain living there fails with nothing done (its silo lacks the interface), and the request is
/// answered 503. Added in 1.1.0.
/// </summary>
public interface IPoolClaimsGrain : IGrainWithStringKey
{
    /// <summary>
    /// As <see cref="IPoolGrain.AllocateAsync"/>, for a request that waits in several pools at once (ADR 0036):
    /// before each time it goes to the store, the grain asks <paramref name="claimant"/> for the
    /// claim of <paramref name="attempt"/>, so one pool at a time tries and only one allocates. A
    /// request refused the claim (served elsewhere, or over) is answered
    /// <see cref="AllocationStatus.NoCapacity"/> with nothing written.
    /// </summary>
    [ResponseTimeout("00:20:00")]
    [Alias("pool-allocate-claimed-1")]
    Task<AllocationOutcome> AllocateClaimedAsync(AllocationRequest request, TimeSpan maxWait, IPreferredAllocationGrain claimant, Guid attempt, CancellationToken cancellationToken = default);
}

/// <summary>A pool grain's queues at one moment, and the silo that hosts it.</summary>
[GenerateSerializer]
[Immutable]
[Alias("allocator.pool-grain-status")]
public sealed record PoolGrainStatus(
    [property: Id(0)] string Silo,
    [property: Id(1)] int Waiters,
    [property: Id(2)] int QueuedAllocations,
    [property: Id(3)] int AllocationBatchesInFlight,
    [property: Id(4)] int QueuedReleases,
    [property: Id(5)] int ReleaseBatchesInFlight)
{
    /// <summary>
    /// The demand the grain saw over its recent window (issue 49); null from a grain of a release
    /// before 1.1.0, which does not count it.
    /// </summary>
    [Id(6)]
    public PoolDemandCounts? Demand { get; init; }
}

/// <summary>
/// A pool's demand as its grain saw it over <see cref="Window"/>: requests that arrived (and the
/// units they asked for), those answered "no capacity" (at once or when their wait ran out), and
/// the callers parked, at most and now. The host turns it into workers wanted.
/// </summary>
[GenerateSerializer]
[Immutable]
[Alias("allocator.pool-demand-counts")]
public sealed record PoolDemandCounts(
    [property: Id(0)] TimeSpan Window,
    [property: Id(1)] long Arrivals,
    [property: Id(2)] long ArrivedUnits,
    [property: Id(3)] long Refusals,
    [property: Id(4)] long RefusedUnits,
    [property: Id(5)] int PeakWaiters,
    [property: Id(6)] int WaitersNow);

/// <summary>
/// Absorbs registration storms: registrations arriving together at this silo are upserted in
/// batches. A stateless worker: one local activation per pool in every silo, so registrations
/// never cross the network to be batched.
/// </summary>
public interface IRegistrationBatcherGrain : IGrainWithStringKey
{
    [Alias("48D6E696")]
    Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default);

    /// <summary>What this silo's batcher of the pool holds now.</summary>
    [AlwaysInterleave]
    [Alias("BF897D25")]
    Task<RegistrationBatcherStatus> GetStatusAsync();
}

/// <summary>A registration batcher's queue at one moment.</summary>
[GenerateSerializer]
[Immutable]
[Alias("allocator.registration-batcher-status")]
public sealed record RegistrationBatcherStatus(
    [property: Id(0)] int Queued,
    [property: Id(1)] int BatchesInFlight,
    [property: Id(2)] bool SettingsKnown);
