using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>The pool operations of the PostgreSQL store: create or update, read, statistics, removal of an empty pool.</summary>
internal sealed class PostgresPools(PostgresStoreContext context)
{
    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        var created = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("upsert_pool",
                poolId, settings.Strategy.ToName(), Ms(settings.DefaultLease), (long)settings.MaxWait.TotalMilliseconds,
                Ms(settings.HeartbeatTimeout), settings.SerializeRegistrations, context.Channel, settings.Placement.ToName());
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            var created = reader.GetBoolean(0);
            await reader.EndAsync(ct);
            return created;
        }, duplicateKeyIsTransient: true, cancellationToken);
        context.ForgetSettings(poolId);
        return new PoolUpsertResult(new Pool(poolId, settings), created);
    }

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var settings = await context.ReadSettingsAsync(poolId, cancellationToken);
        return settings is null ? null : new Pool(poolId, settings);
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("get_pool_statistics", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            if (!await reader.ReadAsync(ct))
            {
                throw AllocatorException.PoolNotFound(poolId);
            }

            return new PoolStatistics
            {
                PoolId = poolId,
                Settings = PostgresRowReaders.ReadSettings(reader, 0, placementAt: 15),
                Workers = reader.GetInt32(5),
                AvailableWorkers = reader.GetInt32(6),
                Capacity = reader.GetInt64(7),
                Load = reader.GetInt64(8),
                FreeSlots = reader.GetInt64(9),
                MinLoad = reader.GetInt32(10),
                MaxLoad = reader.GetInt32(11),
                MinScore = reader.GetInt64(12),
                MaxScore = reader.GetInt64(13),
                ActiveAllocations = reader.GetInt64(14),
            };
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var removal = await context.Retry.RunAsync(async ct =>
        {
            // Two statements, one implicit transaction: lock the pool row, then count and delete
            // with a snapshot taken after the lock (see remove_pool.sql for why not one).
            await using var batch = context.DataSource.CreateBatch();
            batch.BatchCommands.Add(context.BatchCommand("remove_pool_lock", poolId));
            batch.BatchCommands.Add(context.BatchCommand("remove_pool", poolId, context.Channel));
            batch.Timeout = PostgresStoreContext.DriverCommandTimeout;
            await using var reader = await batch.ExecuteReaderAsync(ct);
            await reader.NextResultAsync(ct);
            await reader.ReadAsync(ct);
            var removal = new PoolRemoval(reader.GetBoolean(0), reader.GetInt32(1) > 0, reader.GetInt32(2), reader.GetInt64(3));
            await reader.EndAsync(ct);
            return removal;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (removal.Removed)
        {
            context.ForgetSettings(poolId);
        }

        return removal;
    }
}
