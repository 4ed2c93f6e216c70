using System.Diagnostics;
using System.Text.Json;
using Allocator.Storage.Internal;
using Allocator.Telemetry;
using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// Allocation in the PostgreSQL store: the skip-locked statement, fresh retries for requests that
/// found only locked rows, then the blocking statement one request at a time (the strict strategy
/// goes there at once), and one more try after the pool's expired leases are ended; each request
/// decided once its statement committed (<see cref="AllocationBatch"/>).
/// </summary>
internal sealed class PostgresAllocations(PostgresStoreContext context, PostgresLeases leases)
{
    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        (await AllocateAsync(poolId, requests, fence: null, onCommitted, cancellationToken))!;

    /// <param name="fence">The grain activation's fence each statement checks; <see langword="null"/>: none.</param>
    /// <returns><see langword="null"/> when the fence was stale before anything was decided (nothing written).</returns>
    public async Task<IReadOnlyList<AllocationOutcome>?> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long? fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);
        var settings = await context.LoadSettingsAsync(poolId, cancellationToken) ?? throw AllocatorException.PoolNotFound(poolId);

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.allocate");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, PostgresStoreContext.StoreName);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, context.Options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(settings.Strategy));
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, requests.Count);

        var batch = new AllocationBatch(requests, onCommitted) { Fence = fence };
        try
        {
            await RunStagesAsync(poolId, settings.Strategy, batch, [.. Enumerable.Range(0, requests.Count)], cancellationToken);

            // An expired lease holds no capacity, whether or not the reaper has run (#5): when a
            // request found none, end this pool's expired leases and try those requests once more.
            var full = batch.Undecided(AllocationStatus.NoCapacity);
            if (full.Count > 0 && await leases.ReapPoolAsync(poolId, cancellationToken) > 0)
            {
                batch.Reopen(full);
                await RunStagesAsync(poolId, settings.Strategy, batch, full, cancellationToken);
            }
        }
        catch (AllocationBatch.FenceStaleException) when (!batch.AnyCommitted)
        {
            activity?.SetTag(AllocatorTelemetry.Tags.Outcome, "superseded");
            return null;
        }
        catch (Exception ex) when (batch.AnyCommitted)
        {
            // Committed work is reported, never thrown away (#1): the requests this failure left
            // undecided answer Unavailable; their outcome is unknown unless the error says the
            // statement rolled back (or found the fence stale, which writes nothing).
            var unknown = ex is not (AllocatorException { OutcomeUnknown: false } or AllocationBatch.FenceStaleException);
            activity?.AddEvent(new ActivityEvent("allocator.batch_failed_after_commit", tags: new ActivityTagsCollection { ["exception.type"] = ex.GetType().Name }));
            batch.DecideRest(AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, batch.Retries), unknown));
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }

        var outcomes = batch.Complete();
        if (activity is not null && requests.Count == 1)
        {
            AllocatorTelemetry.TagSingleAllocation(activity, requests[0], outcomes[0]);
        }

        activity?.SetTag(AllocatorTelemetry.Tags.Retries, batch.Retries);
        return outcomes;
    }

    /// <summary>
    /// The stages of one allocation for the requests at <paramref name="indexes"/>: the skip-locked
    /// statement, fresh retries for requests that found only locked rows, then the blocking
    /// statement (the strict strategy goes to it at once). No retry or fallback statement starts
    /// for a request past its deadline: it answers Unavailable, nothing written.
    /// </summary>
    private async Task RunStagesAsync(string poolId, AllocationStrategy strategy, AllocationBatch batch, List<int> indexes, CancellationToken cancellationToken)
    {
        if (strategy != AllocationStrategy.SkipLocked)
        {
            await AllocateBlockingAsync(poolId, batch, indexes, cancellationToken);
            return;
        }

        var pending = indexes;
        while (true)
        {
            pending = await AllocateOnceAsync(poolId, batch, pending, blocking: false, cancellationToken);
            pending = batch.DropPastDeadline(pending, context.Time.GetUtcNow());
            if (pending.Count == 0)
            {
                return;
            }

            if (batch.Retries == context.Options.SkipRetries)
            {
                // Last resort, in its own statement: wait for the true least-loaded rows.
                await AllocateBlockingAsync(poolId, batch, pending, cancellationToken);
                return;
            }

            batch.Retries++;
            await Task.Delay(context.Retry.Jitter(), context.Time, cancellationToken);
        }
    }

    /// <summary>
    /// One allocation statement for the requests at <paramref name="indexes"/>; decides their
    /// outcomes once it has committed and returns the indexes that found only locked rows.
    /// </summary>
    private async Task<List<int>> AllocateOnceAsync(string poolId, AllocationBatch batch, List<int> indexes, bool blocking, CancellationToken cancellationToken)
    {
        var requests = batch.Requests;
        var keys = new string[indexes.Count];
        var units = new int[indexes.Count];
        var leases = new long?[indexes.Count];
        var fallbackLeases = new long?[indexes.Count];
        var tags = new string[indexes.Count][];
        for (var i = 0; i < indexes.Count; i++)
        {
            var request = requests[indexes[i]];
            keys[i] = StoredSessionKey.Of(request); // the key is its owner's (issue 22)
            units[i] = request.Units;
            leases[i] = Ms(request.Lease);
            fallbackLeases[i] = Ms(request.FallbackLease);
            tags[i] = NormalizeTags(request.RequiredTags);
        }

        var tagsJson = JsonSerializer.Serialize(tags);
        var retries = batch.Retries;
        var rows = await context.Retry.RunAsync(async ct =>
        {
            await using var command = (blocking, batch.Fence) switch
            {
                (true, null) => context.Command("allocate_blocking", poolId, keys, units, Jsonb(tagsJson), leases, context.LockTimeoutSetting, context.RetentionMs, fallbackLeases),
                (false, null) => context.Command("allocate_skip_locked", poolId, keys, units, Jsonb(tagsJson), leases, context.RetentionMs, fallbackLeases),
                (true, { } fence) => context.Command("allocate_blocking_fenced", poolId, keys, units, Jsonb(tagsJson), leases, context.LockTimeoutSetting, context.RetentionMs, fallbackLeases, fence),
                (false, { } fence) => context.Command("allocate_skip_locked_fenced", poolId, keys, units, Jsonb(tagsJson), leases, context.RetentionMs, fallbackLeases, fence),
            };
            await using var reader = await command.ExecuteReaderAsync(ct);
            var answered = new List<(int Index, AllocationOutcome? Outcome)>();
            while (await reader.ReadAsync(ct))
            {
                answered.Add((indexes[reader.GetInt32(0)], PostgresRowReaders.ReadAllocationRow(reader, poolId, blocking, retries)));
            }

            await reader.EndAsync(ct);
            return answered;
        }, duplicateKeyIsTransient: true, cancellationToken, poolId);

        // A fenced statement answers no row when a later activation has claimed the pool.
        if (rows.Count == 0 && batch.Fence is not null)
        {
            throw new AllocationBatch.FenceStaleException();
        }

        // The rows arrive before the statement's commit is confirmed: decide only now.
        var pending = new List<int>();
        foreach (var (index, outcome) in rows)
        {
            if (outcome is null)
            {
                pending.Add(index); // found only locked rows
            }
            else
            {
                batch.Decide(index, outcome);
            }
        }

        return pending;
    }

    /// <summary>
    /// The blocking statements for the requests still undecided: <b>one request per statement</b>,
    /// in request order, so a statement waiting for a row lock holds no other row of its own and
    /// blocking allocations cannot wait on each other (or on a release or registration batch, which
    /// lock in id order) in a cycle (#6: 8 concurrent strict batches of mixed units deadlocked when
    /// one statement picked row after row in score order). Each wait is bounded by the lock
    /// timeout, and no statement starts for a request past its deadline. When its rows stay
    /// locked past the lock timeout (after the transient retries), only that request is answered
    /// <see cref="AllocationStatus.Unavailable"/> (nothing written; ADR 0007).
    /// </summary>
    private async Task AllocateBlockingAsync(string poolId, AllocationBatch batch, List<int> pending, CancellationToken cancellationToken)
    {
        foreach (var index in pending)
        {
            if (batch.DropPastDeadline([index], context.Time.GetUtcNow()).Count == 0)
            {
                continue;
            }

            try
            {
                if ((await AllocateOnceAsync(poolId, batch, [index], blocking: true, cancellationToken)).Count > 0)
                {
                    batch.Decide(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, true, batch.Retries)));
                }
            }
            catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.Unavailable && !ex.OutcomeUnknown && !cancellationToken.IsCancellationRequested)
            {
                batch.DecideIfOpen(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, true, batch.Retries)));
            }
        }
    }
}
