namespace Allocator;

/// <summary>One request for capacity in a pool.</summary>
/// <param name="SessionKey">The caller's idempotency key: one active allocation per key per pool.</param>
/// <param name="Units">Slots to take on one worker.</param>
/// <param name="RequiredTags">Tags the worker must all carry.</param>
/// <param name="Lease">Lease time; <see langword="null"/> takes the pool's default lease.</param>
/// <param name="Deadline">
/// When the caller stops waiting (from the caller's <see cref="TimeProvider"/>). A store starts no
/// retry or fallback statement for a request past its deadline: it answers
/// <see cref="AllocationStatus.Unavailable"/> with nothing written. <see langword="null"/>: no deadline.
/// </param>
public sealed record AllocationRequest(
    string SessionKey,
    int Units = 1,
    IReadOnlyList<string>? RequiredTags = null,
    TimeSpan? Lease = null,
    DateTimeOffset? Deadline = null)
{
    /// <summary>
    /// The lease when neither the request (<see cref="Lease"/>) nor the pool (its default lease)
    /// names one; <see langword="null"/>: then the allocation never expires. The store decides it
    /// with the pool's settings as they are when it allocates, so a caller that does not know them
    /// (or knows them stale) can still ask for "the pool's default, else this".
    /// </summary>
    public TimeSpan? FallbackLease { get; init; }

    /// <summary>
    /// The principal the allocation belongs to (a broker's tenant). The session key is the owner's:
    /// the same key sent by another owner is another key, and never finds this owner's allocation.
    /// <see langword="null"/>: no owner (operators' tools; allocations made before owners existed).
    /// </summary>
    public string? Owner { get; init; }
}
