
namespace Allocator.Storage.SqlServer.Internal;

/// <summary>The pool operations of the SQL Server store: create or update, read, statistics, removal of an empty pool.</summary>
internal sealed class SqlServerPools(SqlServerStoreContext context)
{
    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        var created = await context.RunAsync(poolId, () => context.Commands.UpsertPool(poolId, settings), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return reader.GetBoolean(0);
        }, cancellationToken);
        context.SettingsCache.Invalidate(poolId);
        if (!created)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return new PoolUpsertResult(new Pool(poolId, settings), created);
    }

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await context.ReadSettingsAsync(poolId, cancellationToken) is { } settings ? new Pool(poolId, settings) : null;
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync(poolId, () => context.Commands.GetPoolStatistics(poolId), async (reader, ct) =>
        {
            if (!await reader.ReadAsync(ct))
            {
                throw AllocatorException.PoolNotFound(poolId);
            }

            return new PoolStatistics
            {
                PoolId = poolId,
                Settings = SqlServerRowReaders.ReadSettings(reader),
                Workers = reader.GetInt32(reader.GetOrdinal("workers")),
                AvailableWorkers = reader.GetInt32(reader.GetOrdinal("available_workers")),
                Capacity = reader.GetInt64(reader.GetOrdinal("capacity")),
                Load = reader.GetInt64(reader.GetOrdinal("load_slots")),
                FreeSlots = reader.GetInt64(reader.GetOrdinal("free_slots")),
                ActiveAllocations = reader.GetInt64(reader.GetOrdinal("active_allocations")),
                MinLoad = reader.GetInt32(reader.GetOrdinal("min_load")),
                MaxLoad = reader.GetInt32(reader.GetOrdinal("max_load")),
                MinScore = reader.GetInt64(reader.GetOrdinal("min_score")),
                MaxScore = reader.GetInt64(reader.GetOrdinal("max_score")),
            };
        }, cancellationToken);
    }

    public async Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        PoolRemoval removal;
        try
        {
            removal = await context.RunAsync(poolId, () => context.Commands.RemovePool(poolId), async (reader, ct) =>
            {
                await reader.ReadAsync(ct);
                return new PoolRemoval(reader.GetBoolean(0), reader.GetBoolean(1), reader.GetInt32(2), reader.GetInt64(3));
            }, cancellationToken);
        }
        catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.NotFound)
        {
            // 547 on the pool row's DELETE: a worker was registered after the counts (remove_pool.sql); all rolled back.
            return new PoolRemoval(Found: true, Removed: false, Workers: 1, ActiveAllocations: 0);
        }

        if (removal.Removed)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return removal;
    }
}
