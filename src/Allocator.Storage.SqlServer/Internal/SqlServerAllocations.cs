using System.Diagnostics;
using System.Text;
using System.Text.Json;
using Allocator.Storage.Internal;
using Allocator.Telemetry;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// Allocation in the SQL Server store: the call's stages run in <see cref="AllocationStages"/>
/// (skip-locked statement, fresh retries, the blocking statement one request at a time, one more
/// try after the pool's expired leases are ended); this class gives them their statements
/// (<see cref="IAllocationStatements"/>, the embedded scripts) and the call its span.
/// </summary>
internal sealed class SqlServerAllocations : IAllocationStatements
{
    private readonly SqlServerStoreContext _context;
    private readonly SqlServerLeases _leases;
    private readonly AllocationStages _stages;

    public SqlServerAllocations(SqlServerStoreContext context, SqlServerLeases leases)
    {
        _context = context;
        _leases = leases;
        _stages = new AllocationStages(this, context.Options, context.Time, context.Retry.Jitter);
    }

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        (await AllocateAsync(poolId, requests, fence: null, onCommitted, cancellationToken))!;

    /// <param name="fence">The grain activation's fence every statement checks (issue 47); <see langword="null"/>: none.</param>
    /// <returns><see langword="null"/> when the fence was stale before anything was decided (nothing written).</returns>
    public async Task<IReadOnlyList<AllocationOutcome>?> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long? fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);

        // Settings from the cache (one read per pool and period); a stale strategy is caught by
        // the script (50412) and the call follows the other way with fresh settings. An unknown
        // pool is the script's 50404.
        var settings = await _context.SettingsCache.GetAsync(poolId, cancellationToken);
        var strict = settings?.Strategy == AllocationStrategy.Strict;

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.allocate");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, SqlServerStoreContext.StoreName);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, _context.Options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(strict ? AllocationStrategy.Strict : AllocationStrategy.SkipLocked));
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, requests.Count);

        IReadOnlyList<AllocationOutcome>? outcomes;
        try
        {
            outcomes = await _stages.RunAsync(poolId, strict, requests, fence, onCommitted, () => _context.SettingsCache.Invalidate(poolId), cancellationToken);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }

        if (outcomes is null)
        {
            activity?.SetTag(AllocatorTelemetry.Tags.Outcome, "superseded");
            return null;
        }

        if (activity is not null && requests.Count == 1)
        {
            AllocatorTelemetry.TagSingleAllocation(activity, requests[0], outcomes[0]);
        }

        activity?.SetTag(AllocatorTelemetry.Tags.Retries, outcomes.Count == 0 ? 0 : outcomes.Max(o => o.Decision.Retries));
        return outcomes;
    }

    Task<IReadOnlyList<AllocationRow>> IAllocationStatements.SkipLockedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, IReadOnlyList<int> indexes, long? fence, CancellationToken cancellationToken)
    {
        var json = AllocationJson(requests, indexes);
        return _context.RunAsync(poolId, () => _context.Commands.Allocate(poolId, json, fence), SqlServerRowReaders.ReadAllocationRowsAsync, cancellationToken);
    }

    async Task<AllocationRow?> IAllocationStatements.BlockingAsync(string poolId, AllocationRequest request, bool fallback, long? fence, CancellationToken cancellationToken)
    {
        // One id for every re-run of this statement: a re-run after a deadlock is the same attempt.
        var allocationId = Guid.CreateVersion7(_context.Time.GetUtcNow());
        var rows = await _context.RunAsync(poolId, () => _context.Commands.AllocateBlocking(poolId, allocationId, request, fallback, fence), SqlServerRowReaders.ReadAllocationRowsAsync, cancellationToken);
        return rows.Count switch
        {
            1 => rows[0],
            0 when fence is not null => null, // superseded
            _ => throw new InvalidOperationException($"allocate_blocking answered {rows.Count} rows for one request."),
        };
    }

    Task<int> IAllocationStatements.ReapPoolAsync(string poolId, CancellationToken cancellationToken) =>
        _leases.ReapPoolAsync(poolId, cancellationToken);

    internal string AllocationJson(IReadOnlyList<AllocationRequest> requests, IEnumerable<int> indexes)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            foreach (var i in indexes)
            {
                var request = requests[i];
                json.WriteStartObject();
                json.WriteNumber("i", i);
                json.WriteString("a", Guid.CreateVersion7(_context.Time.GetUtcNow()));
                json.WriteString("k", StoredSessionKey.Of(request)); // the key is its owner's (issue 22)
                json.WriteNumber("u", request.Units);
                if (request.RequiredTags is { Count: > 0 } tags)
                {
                    json.WriteStartArray("t");
                    foreach (var tag in tags)
                    {
                        json.WriteStringValue(tag);
                    }

                    json.WriteEndArray();
                }
                else
                {
                    json.WriteNull("t");
                }

                WriteMilliseconds(json, "l", request.Lease);
                WriteMilliseconds(json, "f", request.FallbackLease);

                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    private static void WriteMilliseconds(Utf8JsonWriter json, string name, TimeSpan? value)
    {
        if (SqlServerCommandFactory.Milliseconds(value) is { } ms)
        {
            json.WriteNumber(name, ms);
        }
        else
        {
            json.WriteNull(name);
        }
    }
}
