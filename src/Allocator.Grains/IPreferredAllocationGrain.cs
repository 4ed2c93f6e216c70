using Orleans.Concurrency;

namespace Allocator.Grains;

/// <summary>
/// One session key's allocation across an ordered list of pools (ADR 0036): the first pool in
/// order with room answers, and the key stays one allocation across the whole list. One
/// activation per (owner, key) in the cluster, so attempts for one key run one at a time.
/// </summary>
/// <remarks>
/// Key: <see cref="PreferredAllocationKey.Of"/>. Wire identities as <see cref="IPoolGrain"/>'s
/// (ADR 0026): added in 1.1.0; a 1.0.0 silo never hosts it (it lacks the grain type), and a
/// 1.0.0 host never calls it.
/// </remarks>
public interface IPreferredAllocationGrain : IGrainWithStringKey
{
    /// <summary>
    /// Allocates for <paramref name="request"/> in the first of <paramref name="pools"/> with room,
    /// or answers the allocation the key already holds in any of them. When every pool is full
    /// and <paramref name="maxWait"/> is above zero, the request waits in every pool's queue at
    /// once and is served by whichever frees a slot first.
    /// </summary>
    [ResponseTimeout("00:20:00")]
    [Alias("pref-allocate-1")]
    Task<AllocationOutcome> AllocateAsync(AllocationRequest request, string[] pools, TimeSpan maxWait, CancellationToken cancellationToken = default);

    /// <summary>
    /// A pool's grain is about to send this key's waiting request to its store: a lease number
    /// above zero when it may (one pool at a time), zero when the request is served or over.
    /// </summary>
    [AlwaysInterleave]
    [Alias("pref-claim-1")]
    Task<long> ClaimAsync(string pool, Guid attempt);

    /// <summary>The pool holding the claim found no room and parked the request again. One-way.</summary>
    [OneWay]
    [AlwaysInterleave]
    [Alias("pref-give-back-1")]
    Task GiveBackClaimAsync(string pool, Guid attempt, long lease);
}

/// <summary>The key of a <see cref="IPreferredAllocationGrain"/>: the caller's owner (tenant) and session key.</summary>
public static class PreferredAllocationKey
{
    /// <summary>The owner in front of the key, parted by a unit separator (no session key holds one), as the stores keep it.</summary>
    public static string Of(string? owner, string sessionKey) => owner is null ? sessionKey : string.Concat(owner, "\u001F", sessionKey);
}
