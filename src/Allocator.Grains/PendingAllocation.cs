using System.Diagnostics;

namespace Allocator.Grains;

/// <summary>One caller's allocation request while the pool grain holds it (queued, in a batch, or parked).</summary>
internal sealed class PendingAllocation(AllocationRequest request, TimeSpan maxWait, long arrival, DateTimeOffset arrivedAt, long arrivalTimestamp, DateTimeOffset callDeadline)
{
    private int _done; // 0 or 1: who answers the caller (a grain turn, or a cancellation callback on any thread)
    private int _gaveUp;
    private int _inStore; // 1 while a batch holding it is in the store

    public AllocationRequest Request { get; } = request;

    /// <summary>The wait the caller asked for (already bounded by <see cref="AllocatorLimits.MaxWait"/>).</summary>
    public TimeSpan MaxWait { get; } = maxWait;

    /// <summary>Arrival order in this activation: waiters queue by it.</summary>
    public long Arrival { get; } = arrival;

    public DateTimeOffset ArrivedAt { get; } = arrivedAt;

    public long ArrivalTimestamp { get; } = arrivalTimestamp;

    /// <summary>
    /// The caller stops waiting by then (its wait plus the grain call timeout): a request still
    /// queued at that moment goes to no batch.
    /// </summary>
    public DateTimeOffset CallDeadline { get; } = callDeadline;

    /// <summary>
    /// The caller's answer. Continuations run inline (no <c>RunContinuationsAsynchronously</c>):
    /// the only one is Orleans' own, which sends the response and is scheduled on this grain's
    /// turns, and Orleans completes its callers' tasks asynchronously, so no caller code ever runs
    /// inside a grain turn. Inline, a batch answers its callers without a thread-pool hop each:
    /// measured at loopback, 2,400-2,700 allocate + release steps/s with the hop, 4,600-4,700
    /// without (same machine, alternating runs).
    /// </summary>
    public TaskCompletionSource<AllocationOutcome> Completion { get; } = new();

    public Activity? Span { get; init; }

    /// <summary>For a request waiting in several pools at once: whom to ask before each store call (ADR 0036).</summary>
    public AllocationClaim? Claim { get; init; }

    /// <summary>The claim's lease while this pool holds it (zero otherwise); touched in turns only.</summary>
    public long ClaimLease { get; set; }

    public CancellationTokenRegistration CancellationRegistration { get; set; }

    /// <summary>When the caller stops waiting for capacity (known once the pool's maximum wait is).</summary>
    public DateTimeOffset? WaitDeadline { get; set; }

    /// <summary>The last outcome it was parked with (answered when its wait ends).</summary>
    public AllocationOutcome? LastOutcome { get; set; }

    /// <summary>Its batch's outcome for it was acted on (answered, parked or released); touched in turns only.</summary>
    public bool Settled { get; set; }

    /// <summary>Timestamp at which the batch that served it started (0 before).</summary>
    public long BatchStarted { get; set; }

    /// <summary>Answered (result, error or cancellation): nothing else may answer it.</summary>
    public bool IsDone => Volatile.Read(ref _done) != 0;

    /// <summary>The caller gave up (canceled, or its call deadline passed) before it was answered.</summary>
    public bool GaveUp => Volatile.Read(ref _gaveUp) != 0;

    /// <summary>
    /// In a batch in the store: a caller giving up now cannot be told "nothing was written". Set
    /// (a full fence) before the grain checks <see cref="IsDone"/> and sends the request, while a
    /// cancellation claims <see cref="TryGiveUp"/> (a full fence) before it reads this: one of the
    /// two always sees the other.
    /// </summary>
    public bool InStore => Volatile.Read(ref _inStore) != 0;

    public void EnterStore() => Interlocked.Exchange(ref _inStore, 1);

    /// <summary>Back from the store (parked again, or answered).</summary>
    public void LeaveStore() => Interlocked.Exchange(ref _inStore, 0);

    /// <summary>Claims the right to answer; false when someone already did.</summary>
    public bool TryFinish() => Interlocked.Exchange(ref _done, 1) == 0;

    /// <summary>Claims the right to answer on behalf of a caller that gave up.</summary>
    public bool TryGiveUp()
    {
        if (!TryFinish())
        {
            return false;
        }

        Volatile.Write(ref _gaveUp, 1);
        return true;
    }
}

/// <summary>One release while the pool grain holds it.</summary>
/// <param name="abandonedKey">
/// For a release the grain made itself, of an allocation whose caller gave up: its session key
/// (see <see cref="AbandonedKeys"/>). <see langword="null"/> for a caller's release.
/// </param>
internal sealed class PendingRelease(LeaseRelease release, Activity? span, string? abandonedKey = null)
{
    public LeaseRelease Release { get; } = release;

    public Activity? Span { get; } = span;

    public string? AbandonedKey { get; } = abandonedKey;

    /// <summary>False for a release the grain made itself.</summary>
    public bool Caller => AbandonedKey is null;

    /// <summary>The caller's answer; continuations run inline, as for <see cref="PendingAllocation.Completion"/>.</summary>
    public TaskCompletionSource<LeaseResult> Completion { get; } = new();

    public CancellationTokenRegistration CancellationRegistration { get; set; }
}

/// <summary>A request's claim across pools (<see cref="IPreferredAllocationGrain"/>), as one pool's grain uses it.</summary>
internal sealed class AllocationClaim(IPreferredAllocationGrain claimant, Guid attempt, string poolId)
{
    /// <summary>Asks for the claim: a lease above zero when granted, zero when refused.</summary>
    public Task<long> AskAsync() => claimant.ClaimAsync(poolId, attempt);

    /// <summary>Gives the claim back (the request found no room and waits again). One-way.</summary>
    public void GiveBack(long lease) => _ = claimant.GiveBackClaimAsync(poolId, attempt, lease);
}
