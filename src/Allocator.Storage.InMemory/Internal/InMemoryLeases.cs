using Allocator.Storage.Internal;
namespace Allocator.Storage.InMemory.Internal;

/// <summary>
/// What follows an allocation in the in-memory store: release (one or a batch), renew, read one,
/// and the ending of expired leases (one pool's, or the reaper's across pools, which also
/// forgets the history past its retention).
/// </summary>
internal sealed class InMemoryLeases(InMemoryStoreContext context)
{
    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken)
    {
        LeaseResult result;
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            result = EndIfCurrent(pool, new LeaseRelease(allocationId, epoch), context.Time.GetUtcNow());
        }

        if (result.Status == LeaseStatus.Ok)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult(result);
    }

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var results = new LeaseResult[releases.Count];
        var anyReleased = false;
        lock (context.Sync)
        {
            // Under one monitor, in request order: a repeated id sees the first one's release.
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            var now = context.Time.GetUtcNow();
            for (var i = 0; i < releases.Count; i++)
            {
                results[i] = EndIfCurrent(pool, releases[i], now);
                anyReleased |= results[i].Status == LeaseStatus.Ok;
            }
        }

        if (anyReleased)
        {
            // One notification per batch, as the database stores notify once per statement.
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<LeaseResult>>(results);
    }

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        lock (context.Sync)
        {
            return Task.FromResult(context.Pools.TryGetValue(poolId, out var pool) ? ++pool.Activation : 0L);
        }
    }

    public Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        LeaseResult result;
        lock (context.Sync)
        {
            if (!context.Pools.TryGetValue(poolId, out var pool) || pool.Activation != fence)
            {
                // A later activation holds the pool (or the pool is gone): nothing changes.
                return Task.FromResult(new LeaseResult(LeaseStatus.StaleEpoch, null));
            }

            // Checked and ended under one monitor, as the databases hold the pool's row throughout.
            context.EndExpired(pool);
            result = EndIfCurrent(pool, release, context.Time.GetUtcNow());
        }

        if (result.Status == LeaseStatus.Ok)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult(result);
    }

    /// <summary>One release under the monitor: ends the allocation when its epoch (and owner) are current.</summary>
    private static LeaseResult EndIfCurrent(PoolData pool, LeaseRelease release, DateTimeOffset now)
    {
        var result = CheckLease(pool, release.AllocationId, release.Epoch, release.Owner, out var allocation);
        return result.Status == LeaseStatus.Ok
            ? new LeaseResult(LeaseStatus.Ok, InMemoryStoreContext.EndAllocation(pool, allocation!, now, AllocationEndReason.Released, releaseLoad: true))
            : result;
    }

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool); // expired is expired at this call, whether or not the reaper has run
            var result = CheckLease(pool, allocationId, epoch, owner, out var allocation);
            if (result.Status != LeaseStatus.Ok)
            {
                return Task.FromResult(result);
            }

            var effective = lease ?? pool.Settings.DefaultLease;
            var renewed = allocation! with
            {
                Epoch = context.NextEpoch(),
                ExpiresAt = effective is { } l ? context.Time.GetUtcNow() + l : null,
            };
            pool.Allocations[allocationId] = renewed;
            pool.ActiveBySession[InMemoryStoreContext.KeyOf(renewed)] = renewed;
            return Task.FromResult(new LeaseResult(LeaseStatus.Ok, renewed));
        }
    }

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken)
    {
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            return Task.FromResult(pool.Allocations.GetValueOrDefault(allocationId));
        }
    }

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner)
    {
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            var key = StoredSessionKey.Of(owner, sessionKey);
            return Task.FromResult(
                pool.ActiveBySession.GetValueOrDefault(key)
                ?? (pool.EndedBySession.TryGetValue(key, out var ended) && ended.EndedAt > context.Time.GetUtcNow() - context.Options.HistoryRetention ? ended : null));
        }
    }

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        var reaped = new List<Allocation>();
        lock (context.Sync)
        {
            var now = context.Time.GetUtcNow();
            var expired = context.Pools.Values
                .SelectMany(p => p.ActiveBySession.Values.Where(a => a.ExpiresAt <= now).Select(a => (Pool: p, Allocation: a)))
                .OrderBy(x => x.Allocation.ExpiresAt)
                .Take(maxCount)
                .ToList();
            foreach (var (pool, allocation) in expired)
            {
                reaped.Add(InMemoryStoreContext.EndAllocation(pool, allocation, allocation.ExpiresAt!.Value, AllocationEndReason.Expired, releaseLoad: true));
            }

            // The history past its retention is forgotten, as the database stores purge it.
            var cutoff = now - context.Options.HistoryRetention;
            foreach (var pool in context.Pools.Values)
            {
                foreach (var old in pool.Allocations.Values.Where(a => a.EndedAt < cutoff).ToList())
                {
                    pool.Allocations.Remove(old.AllocationId);
                    if (pool.EndedBySession.TryGetValue(InMemoryStoreContext.KeyOf(old), out var latest) && latest.AllocationId == old.AllocationId)
                    {
                        pool.EndedBySession.Remove(InMemoryStoreContext.KeyOf(old));
                    }
                }
            }
        }

        foreach (var poolId in reaped.Select(a => a.PoolId).Distinct())
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<Allocation>>(reaped);
    }

    /// <summary>Ends the pool's expired leases (an allocation that found no capacity tries again after it); how many.</summary>
    public int ReapPool(string poolId)
    {
        var reaped = 0;
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            var now = context.Time.GetUtcNow();
            reaped = context.EndExpired(pool);
        }

        if (reaped > 0)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return reaped;
    }

    /// <summary>The test hook behind <see cref="InMemoryWorkerStore.ExpireLease"/>: the lease expired a second ago.</summary>
    public void ExpireLease(string poolId, Guid allocationId)
    {
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            var expired = pool.Allocations[allocationId] with { ExpiresAt = context.Time.GetUtcNow() - TimeSpan.FromSeconds(1) };
            pool.Allocations[allocationId] = expired;
            if (expired.IsActive)
            {
                pool.ActiveBySession[InMemoryStoreContext.KeyOf(expired)] = expired;
            }
        }
    }

    /// <param name="owner">The caller's principal: another owner's allocation is answered as a missing one (null: anyone).</param>
    private static LeaseResult CheckLease(PoolData pool, Guid allocationId, long epoch, string? owner, out Allocation? allocation)
    {
        if (!pool.Allocations.TryGetValue(allocationId, out allocation)
            || (owner is not null && allocation.Owner is { } actual && !string.Equals(actual, owner, StringComparison.Ordinal)))
        {
            allocation = null;
            return new LeaseResult(LeaseStatus.NotFound, null);
        }

        if (!allocation.IsActive)
        {
            return new LeaseResult(LeaseStatus.NotActive, allocation);
        }

        return allocation.Epoch != epoch
            ? new LeaseResult(LeaseStatus.StaleEpoch, allocation)
            : new LeaseResult(LeaseStatus.Ok, allocation);
    }
}
