using Allocator.Storage.Internal;

namespace Allocator.Storage.InMemory.Internal;

/// <summary>
/// What the in-memory store's operation families share: the one monitor that guards all data
/// (so every operation is atomic like a single SQL statement), the tables, the clock, the
/// options, the change feed, and the steps that several families take under the monitor.
/// </summary>
internal sealed class InMemoryStoreContext
{
    private long _lastEpoch;

    public InMemoryStoreContext(TimeProvider time, InMemoryWorkerStoreOptions options)
    {
        Time = time;
        Options = options;
        Changes = new InMemoryChangeFeed(Sync);
    }

    /// <summary>The one monitor: every read and write of the tables holds it, never across an await.</summary>
    public object Sync { get; } = new();

    public Dictionary<string, PoolData> Pools { get; } = new(StringComparer.Ordinal);

    /// <summary>The pool directory (<see cref="IPoolPlacementStore"/>).</summary>
    public Dictionary<string, PoolPlacement> Directory { get; } = new(StringComparer.Ordinal);

    /// <summary>The store's clock (its "database time").</summary>
    public TimeProvider Time { get; }

    public InMemoryWorkerStoreOptions Options { get; }

    public InMemoryChangeFeed Changes { get; }

    /// <summary>The next allocation epoch, one sequence for the whole store (under <see cref="Sync"/>).</summary>
    public long NextEpoch() => ++_lastEpoch;

    public void Raise(PoolChanged change) => Changes.Raise(change);

    public PoolData FindPool(string poolId)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return Pools.TryGetValue(poolId, out var pool) ? pool : throw AllocatorException.PoolNotFound(poolId);
    }

    /// <summary>
    /// Ends the pool's expired leases, each at its expiry. A lease is over at its expiry whether or
    /// not the reaper has run (issue 20, #5), so every call that reads or acts on allocations or
    /// loads does this first: the databases' statements compute the same view without writing.
    /// </summary>
    /// <returns>How many it ended.</returns>
    public int EndExpired(PoolData pool)
    {
        var now = Time.GetUtcNow();
        var ended = 0;
        foreach (var allocation in pool.ActiveBySession.Values.Where(a => a.ExpiresAt <= now).ToList())
        {
            EndAllocation(pool, allocation, allocation.ExpiresAt!.Value, AllocationEndReason.Expired, releaseLoad: true);
            ended++;
        }

        return ended;
    }

    public static Allocation EndAllocation(PoolData pool, Allocation allocation, DateTimeOffset now, AllocationEndReason reason, bool releaseLoad)
    {
        var ended = allocation with { EndedAt = now, EndReason = reason };
        pool.Allocations[allocation.AllocationId] = ended;
        pool.ActiveBySession.Remove(KeyOf(allocation));
        pool.EndedBySession[KeyOf(allocation)] = ended;
        if (releaseLoad && pool.Workers.TryGetValue(allocation.WorkerId, out var row))
        {
            row.Load -= allocation.Units;
        }

        return ended;
    }

    /// <summary>The key of an allocation in the by-key indexes: a session key is its owner's (issue 22).</summary>
    public static string KeyOf(Allocation allocation) => StoredSessionKey.Of(allocation.Owner, allocation.SessionKey);
}
