namespace Allocator.Storage.InMemory.Internal;

/// <summary>The pool operations of the in-memory store: create or update, read, statistics, removal of an empty pool.</summary>
internal sealed class InMemoryPools(InMemoryStoreContext context)
{
    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        bool created;
        lock (context.Sync)
        {
            created = !context.Pools.TryGetValue(poolId, out var pool);
            if (created)
            {
                context.Pools[poolId] = new PoolData(poolId, settings);
            }
            else
            {
                pool!.Settings = settings;
            }
        }

        if (!created)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return Task.FromResult(new PoolUpsertResult(new Pool(poolId, settings), created));
    }

    public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        lock (context.Sync)
        {
            return Task.FromResult(context.Pools.TryGetValue(poolId, out var pool) ? new Pool(poolId, pool.Settings) : null);
        }
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken)
    {
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            var available = pool.Workers.Values.Where(w => w.State == WorkerState.Available).ToList();
            return Task.FromResult(new PoolStatistics
            {
                PoolId = poolId,
                Settings = pool.Settings,
                Workers = pool.Workers.Count,
                AvailableWorkers = available.Count,
                Capacity = pool.Workers.Values.Sum(w => (long)w.Capacity),
                Load = pool.Workers.Values.Sum(w => (long)w.Load),
                FreeSlots = available.Sum(w => (long)(w.Capacity - w.Load)),
                ActiveAllocations = pool.ActiveBySession.Count,
                MinLoad = available.Count == 0 ? 0 : available.Min(w => w.Load),
                MaxLoad = available.Count == 0 ? 0 : available.Max(w => w.Load),
                MinScore = available.Count == 0 ? 0 : available.Min(w => w.Score),
                MaxScore = available.Count == 0 ? 0 : available.Max(w => w.Score),
            });
        }
    }

    public Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        PoolRemoval removal;
        lock (context.Sync)
        {
            if (!context.Pools.TryGetValue(poolId, out var pool))
            {
                return Task.FromResult(new PoolRemoval(Found: false, Removed: false, Workers: 0, ActiveAllocations: 0));
            }

            var active = pool.Allocations.Values.LongCount(a => a.IsActive);
            var removed = pool.Workers.Count == 0 && active == 0;
            if (removed)
            {
                // As PostgreSQL: the pool and its workers' epochs go; nothing else is kept in memory.
                context.Pools.Remove(poolId);
            }

            removal = new PoolRemoval(Found: true, removed, pool.Workers.Count, active);
        }

        if (removal.Removed)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return Task.FromResult(removal);
    }
}
