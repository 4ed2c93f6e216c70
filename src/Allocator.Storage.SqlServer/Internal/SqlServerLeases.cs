using Allocator.Storage.Internal;
using System.Text;
using System.Text.Json;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// What follows an allocation in the SQL Server store: release (one or a batch), renew, read one,
/// and the ending of expired leases (one pool's, or the reaper's across pools; reap_expired.sql
/// also purges the history past its retention).
/// </summary>
internal sealed class SqlServerLeases(SqlServerStoreContext context)
{
    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var result = await context.RunAsync(poolId, () => context.Commands.Release(poolId, allocationId, epoch), SqlServerRowReaders.ReadLeaseResultAsync, cancellationToken);
        if (result.Status == LeaseStatus.Ok)
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return result;
    }

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken) =>
        ReleaseBatchAsync(poolId, releases, fence: null, cancellationToken);

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync(poolId, () => context.Commands.ClaimPoolActivation(poolId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? reader.GetInt64(0) : 0L, cancellationToken);
    }

    /// <summary>One item of release_batch.sql with the releasing activation's fence: answered 3 (stale epoch), nothing changed, once a later activation claimed the pool.</summary>
    public async Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken) =>
        (await ReleaseBatchAsync(poolId, [release], fence, cancellationToken))[0];

    private async Task<IReadOnlyList<LeaseResult>> ReleaseBatchAsync(string poolId, IReadOnlyList<LeaseRelease> releases, long? fence, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var json = ReleaseJson(releases);
        var results = await context.RunAsync<IReadOnlyList<LeaseResult>>(poolId, () => context.Commands.ReleaseBatch(poolId, json, fence), async (reader, ct) =>
        {
            var answered = new LeaseResult?[releases.Count];
            while (await reader.ReadAsync(ct))
            {
                var status = SqlServerRowReaders.ToLeaseStatus(reader.GetByte(reader.GetOrdinal("status")));
                answered[reader.GetInt32(reader.GetOrdinal("i"))] = new LeaseResult(status, status == LeaseStatus.NotFound ? null : SqlServerRowReaders.ReadAllocation(reader));
            }

            return Array.ConvertAll(answered, r => r ?? throw new InvalidOperationException($"release_batch answered fewer rows than the {releases.Count} releases."));
        }, cancellationToken);

        if (results.Any(r => r.Status == LeaseStatus.Ok))
        {
            context.Changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return results;
    }

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner, CancellationToken cancellationToken)
    {
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync(poolId, () => context.Commands.Renew(poolId, allocationId, epoch, lease, owner), SqlServerRowReaders.ReadLeaseResultAsync, cancellationToken);
    }

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return context.RunAsync(poolId, () => context.Commands.GetAllocation(poolId, allocationId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadAllocation(reader) with { EndReason = SqlServerRowReaders.ReadEndReason(reader) } : null, cancellationToken);
    }

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        ArgumentNullException.ThrowIfNull(sessionKey);
        return context.RunAsync(poolId, () => context.Commands.GetAllocationByKey(poolId, StoredSessionKey.Of(owner, sessionKey)), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadAllocation(reader) with { EndReason = SqlServerRowReaders.ReadEndReason(reader) } : null, cancellationToken);
    }

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        return ReapCoreAsync(maxCount, poolId: null, cancellationToken);
    }

    /// <summary>Ends up to 1,000 expired leases of one pool (an allocation that found no capacity tries again after it); how many.</summary>
    public async Task<int> ReapPoolAsync(string poolId, CancellationToken cancellationToken) =>
        (await ReapCoreAsync(1000, poolId, cancellationToken)).Count;

    /// <summary>Ends up to <paramref name="maxCount"/> expired leases of one pool (or of all, when null).</summary>
    private async Task<IReadOnlyList<Allocation>> ReapCoreAsync(int maxCount, string? poolId, CancellationToken cancellationToken)
    {
        var reaped = await context.RunAsync<IReadOnlyList<Allocation>>(poolId, () => context.Commands.ReapExpired(maxCount, poolId), async (reader, ct) =>
        {
            var ended = new List<Allocation>();
            while (await reader.ReadAsync(ct))
            {
                ended.Add(SqlServerRowReaders.ReadAllocation(reader));
            }

            return ended;
        }, cancellationToken);

        foreach (var changed in reaped.Select(a => a.PoolId).Distinct(StringComparer.Ordinal))
        {
            context.Changes.Raise(new PoolChanged(changed, PoolChangeKind.CapacityAvailable));
        }

        return reaped;
    }

    internal static string ReleaseJson(IReadOnlyList<LeaseRelease> releases)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            for (var i = 0; i < releases.Count; i++)
            {
                json.WriteStartObject();
                json.WriteNumber("i", i);
                json.WriteString("a", releases[i].AllocationId);
                json.WriteNumber("e", releases[i].Epoch);
                if (releases[i].Owner is { } owner)
                {
                    json.WriteString("o", owner);
                }
                else
                {
                    json.WriteNull("o");
                }
                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }
}
