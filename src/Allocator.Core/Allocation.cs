namespace Allocator;

/// <summary>One request for capacity in a pool.</summary>
/// <param name="SessionKey">The caller's idempotency key: one active allocation per key per pool.</param>
/// <param name="Units">Slots to take on one worker.</param>
/// <param name="RequiredTags">Tags the worker must all carry.</param>
/// <param name="Lease">Lease time; <see langword="null"/> takes the pool's default lease.</param>
public sealed record AllocationRequest(
    string SessionKey,
    int Units = 1,
    IReadOnlyList<string>? RequiredTags = null,
    TimeSpan? Lease = null);

/// <summary>Slots granted on one worker.</summary>
public sealed record Allocation
{
    public required Guid AllocationId { get; init; }
    public required string PoolId { get; init; }
    public required string WorkerId { get; init; }
    public required string Address { get; init; }
    public required string SessionKey { get; init; }
    public required int Units { get; init; }

    /// <summary>
    /// Fencing token: unique and increasing, advanced by every renew. Release and renew must
    /// present the current value; an older one belongs to a holder that has been superseded.
    /// </summary>
    public required long Epoch { get; init; }

    /// <summary>Database time.</summary>
    public required DateTimeOffset CreatedAt { get; init; }

    /// <summary>Lease expiry in database time, or <see langword="null"/> for no expiry.</summary>
    public DateTimeOffset? ExpiresAt { get; init; }

    /// <summary>When the allocation ended (release, expiry, deregistration); <see langword="null"/> while active.</summary>
    public DateTimeOffset? EndedAt { get; init; }

    public bool IsActive => EndedAt is null;
}

public enum AllocationStatus
{
    /// <summary>A new allocation was made.</summary>
    Allocated,

    /// <summary>The session key already had an active allocation; it is returned unchanged.</summary>
    Existing,

    /// <summary>No eligible worker has room (checked after skipping, retrying and a blocking wait).</summary>
    NoCapacity,

    /// <summary>
    /// Undecided: every eligible row with room stayed locked past the store's lock timeout.
    /// Nothing was written for this request (other requests of the same batch may have been
    /// allocated and committed); retrying with the same session key is safe.
    /// </summary>
    Unavailable,
}

/// <summary>How a pick was made, for telemetry. Values describe the state at decision time.</summary>
/// <param name="Rank">Position of the chosen worker among eligible workers ordered by score then id (0 = least loaded).</param>
/// <param name="ExcessScore">Chosen worker's score minus the lowest eligible score, in <see cref="WorkerScore"/> units.</param>
/// <param name="RowsSkipped">Eligible workers ranked ahead of the chosen one that were passed over because another transaction held their row.</param>
/// <param name="BlockingFallback">Whether the pick came from the blocking (lock-waiting) fallback.</param>
/// <param name="Retries">Fresh statements issued after the first one found rows only locked.</param>
public readonly record struct AllocationDecision(int Rank, long ExcessScore, int RowsSkipped, bool BlockingFallback, int Retries);

/// <summary>The answer to one request of a batch.</summary>
public sealed record AllocationOutcome(AllocationStatus Status, Allocation? Allocation, AllocationDecision Decision)
{
    public static AllocationOutcome NoCapacity(AllocationDecision decision = default) => new(AllocationStatus.NoCapacity, null, decision);
}

public enum LeaseStatus
{
    Ok,

    /// <summary>No allocation with that id in that pool.</summary>
    NotFound,

    /// <summary>The allocation has already ended (released, expired or its worker deregistered).</summary>
    NotActive,

    /// <summary>The epoch given is not the allocation's current epoch; nothing changed.</summary>
    StaleEpoch,
}

/// <summary>One release of a batch: the allocation to end and the epoch its holder was given.</summary>
/// <param name="AllocationId">The allocation to end.</param>
/// <param name="Epoch">The holder's fencing epoch; a stale one ends nothing.</param>
public readonly record struct LeaseRelease(Guid AllocationId, long Epoch);

/// <summary>Result of a release or renew; <see cref="Allocation"/> is the state after the call when known.</summary>
public sealed record LeaseResult(LeaseStatus Status, Allocation? Allocation);
