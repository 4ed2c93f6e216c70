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
