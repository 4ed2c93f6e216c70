using Allocator.Storage.Internal;
using System.Diagnostics;
using Allocator.Telemetry;
using Npgsql;
using NpgsqlTypes;
using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// What follows an allocation in the PostgreSQL store: release (one or a batch), renew, read one,
/// and the ending of expired leases (one pool's, or the reaper's across pools, which also purges
/// the history past its retention).
/// </summary>
internal sealed class PostgresLeases(PostgresStoreContext context)
{
    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await LeaseAsync("release", poolId, allocationId, [poolId, allocationId, epoch, context.Channel], cancellationToken);
    }

    public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var ids = new Guid[releases.Count];
        var epochs = new long[releases.Count];
        var owners = new string?[releases.Count];
        for (var i = 0; i < releases.Count; i++)
        {
            ids[i] = releases[i].AllocationId;
            epochs[i] = releases[i].Epoch;
            owners[i] = releases[i].Owner;
        }

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.release");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, PostgresStoreContext.StoreName);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, context.Options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, releases.Count);
        try
        {
            // A deadlock or lock timeout rolls the whole statement back, so re-running it whole
            // applies nothing twice.
            return await context.Retry.RunAsync<IReadOnlyList<LeaseResult>>(async ct =>
            {
                await using var command = context.Command("release_batch", poolId, ids, epochs, context.Channel, owners);
                await using var reader = await command.ExecuteReaderAsync(ct);
                var results = new LeaseResult?[releases.Count];
                while (await reader.ReadAsync(ct))
                {
                    var status = reader.GetString(1) switch
                    {
                        "released" => LeaseStatus.Ok,
                        "not_active" => LeaseStatus.NotActive,
                        "stale_epoch" => LeaseStatus.StaleEpoch,
                        _ => LeaseStatus.NotFound,
                    };
                    results[reader.GetInt32(0)] = status == LeaseStatus.NotFound
                        ? new LeaseResult(LeaseStatus.NotFound, null)
                        : new LeaseResult(status, PostgresRowReaders.ReadAllocation(reader, 2, poolId));
                }

                await reader.EndAsync(ct);

                return Array.ConvertAll(results, r => r ?? throw new InvalidOperationException($"release_batch answered fewer rows than the {releases.Count} releases."));
            }, duplicateKeyIsTransient: false, cancellationToken, poolId);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }
    }

    public async Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.claim");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, PostgresStoreContext.StoreName);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, context.Options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        try
        {
            return await context.Retry.RunAsync(async ct =>
            {
                await using var command = context.Command("claim_pool_activation", poolId);
                return await command.ExecuteWriteScalarAsync(ct) is long fence ? fence : 0L;
            }, duplicateKeyIsTransient: false, cancellationToken, poolId);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }
    }

    public async Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.release");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, PostgresStoreContext.StoreName);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, context.Options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, 1);
        try
        {
            return await context.Retry.RunAsync(async ct =>
            {
                await using var command = context.Command("release_abandoned", poolId, release.AllocationId, release.Epoch, context.Channel, fence);
                await using var reader = await command.ExecuteReaderAsync(ct);
                if (!await reader.ReadAsync(ct))
                {
                    throw new InvalidOperationException("release_abandoned answered no row.");
                }

                var result = reader.GetString(1) switch
                {
                    "released" => new LeaseResult(LeaseStatus.Ok, PostgresRowReaders.ReadAllocation(reader, 2, poolId)),
                    "not_active" => new LeaseResult(LeaseStatus.NotActive, PostgresRowReaders.ReadAllocation(reader, 2, poolId)),
                    "stale_epoch" => new LeaseResult(LeaseStatus.StaleEpoch, PostgresRowReaders.ReadAllocation(reader, 2, poolId)),
                    "superseded" => new LeaseResult(LeaseStatus.StaleEpoch, null), // a later activation holds the pool
                    _ => new LeaseResult(LeaseStatus.NotFound, null),
                };
                await reader.EndAsync(ct);
                return result;
            }, duplicateKeyIsTransient: false, cancellationToken, poolId);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }
    }

    public async Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        return await LeaseAsync("renew", poolId, allocationId, [poolId, allocationId, epoch, Nullable(Ms(lease), NpgsqlDbType.Bigint), new NpgsqlParameter { Value = (object?)owner ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text }], cancellationToken, owner);
    }

    public async Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var allocation = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("get_allocation", poolId, allocationId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct)
                ? PostgresRowReaders.ReadAllocation(reader, 0, poolId) with { EndReason = PostgresRowReaders.ReadEndReason(reader, 9) }
                : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (allocation is null)
        {
            await context.EnsurePoolAsync(poolId, cancellationToken);
        }

        return allocation;
    }

    public async Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        ArgumentNullException.ThrowIfNull(sessionKey);
        var (found, allocation) = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("get_allocation_by_key", poolId, StoredSessionKey.Of(owner, sessionKey), context.RetentionMs);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct); // always one row
            var read = reader.IsDBNull(0) ? null : PostgresRowReaders.ReadAllocation(reader, 0, poolId) with { EndReason = PostgresRowReaders.ReadEndReason(reader, 9) };
            return (reader.GetBoolean(10), read);
        }, duplicateKeyIsTransient: false, cancellationToken);
        return found ? allocation : throw AllocatorException.PoolNotFound(poolId);
    }

    public async Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        var reaped = await ReapCoreAsync(maxCount, poolId: null, cancellationToken);

        // The history past its retention, a bounded number of rounds per reap (every instance
        // reaps every ReapInterval, so a backlog drains over a few intervals).
        for (var round = 0; round < 10; round++)
        {
            var purged = await context.Retry.RunAsync(async ct =>
            {
                await using var command = context.Command("purge_history", context.RetentionMs, context.Options.HistoryPurgeBatch);
                return await command.ExecuteNonQueryAsync(ct);
            }, duplicateKeyIsTransient: false, cancellationToken);
            if (purged < context.Options.HistoryPurgeBatch)
            {
                break;
            }
        }

        return reaped;
    }

    /// <summary>Ends up to 1,000 expired leases of one pool (an allocation that found no capacity tries again after it); how many.</summary>
    public async Task<int> ReapPoolAsync(string poolId, CancellationToken cancellationToken) =>
        (await ReapCoreAsync(1000, poolId, cancellationToken)).Count;

    /// <summary>Ends up to <paramref name="maxCount"/> expired leases of one pool (or of all, when null).</summary>
    private Task<IReadOnlyList<Allocation>> ReapCoreAsync(int maxCount, string? poolId, CancellationToken cancellationToken) =>
        context.Retry.RunAsync<IReadOnlyList<Allocation>>(async ct =>
        {
            await using var command = context.Command("reap_expired", maxCount, context.Channel, new NpgsqlParameter { Value = (object?)poolId ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text });
            await using var reader = await command.ExecuteReaderAsync(ct);
            var list = new List<Allocation>();
            while (await reader.ReadAsync(ct))
            {
                list.Add(PostgresRowReaders.ReadReaped(reader));
            }

            await reader.EndAsync(ct);
            return list;
        }, duplicateKeyIsTransient: false, cancellationToken);

    /// <summary>Another owner's allocation is answered as one that does not exist; one without an owner, to anyone.</summary>
    private static bool VisibleTo(Allocation allocation, string? owner) =>
        owner is null || allocation.Owner is null || string.Equals(allocation.Owner, owner, StringComparison.Ordinal);

    private async Task<LeaseResult> LeaseAsync(string script, string poolId, Guid allocationId, object?[] args, CancellationToken cancellationToken, string? owner = null)
    {
        var result = await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command(script, args);
            await using var reader = await command.ExecuteReaderAsync(ct);
            if (!await reader.ReadAsync(ct))
            {
                await reader.EndAsync(ct);
                return null;
            }

            var allocation = PostgresRowReaders.ReadAllocation(reader, 0, poolId);
            var changed = reader.GetBoolean(9);
            // renew.sql also says whether the lease had expired by the statement's clock (#5).
            var expired = script == "renew" && reader.GetBoolean(10);
            var status = changed ? LeaseStatus.Ok : !allocation.IsActive || expired ? LeaseStatus.NotActive : LeaseStatus.StaleEpoch;
            await reader.EndAsync(ct);
            return new LeaseResult(status, allocation);
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (result is null)
        {
            // Not in the hot table: ended (in the history until purged) or never there. A fresh
            // read also sees a release that committed while this statement waited for the row.
            var ended = await GetAllocationAsync(poolId, allocationId, cancellationToken);
            return ended is null || !VisibleTo(ended, owner) ? new LeaseResult(LeaseStatus.NotFound, null) : new LeaseResult(LeaseStatus.NotActive, ended);
        }

        return result;
    }
}
