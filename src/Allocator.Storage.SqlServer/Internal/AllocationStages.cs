using System.Diagnostics;
using Allocator.Storage.Internal;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// The statements one allocation call runs, as <see cref="AllocationStages"/> sees them: the seam
/// between the bookkeeping of a call (what runs next, what is reported, what a failure leaves)
/// and SQL Server. <see cref="SqlServerAllocations"/> implements it with the embedded scripts;
/// the pure tests replace it.
/// </summary>
internal interface IAllocationStatements
{
    /// <summary>
    /// One skip-locked statement (<c>allocate_skip_locked.sql</c>, one transaction) for the
    /// requests at <paramref name="indexes"/>; one row per request, keyed by its index in
    /// <paramref name="requests"/> (status 3: only locked rows had room). Returns once committed.
    /// With a <paramref name="fence"/> that a later activation has superseded: no row, nothing written.
    /// </summary>
    Task<IReadOnlyList<AllocationRow>> SkipLockedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, IReadOnlyList<int> indexes, long? fence, CancellationToken cancellationToken);

    /// <summary>
    /// One blocking statement (<c>allocate_blocking.sql</c>) for one request; <paramref name="fallback"/>:
    /// the skip-locked strategy's last resort, else strict. <see langword="null"/>: the <paramref name="fence"/>
    /// was superseded, nothing written.
    /// </summary>
    Task<AllocationRow?> BlockingAsync(string poolId, AllocationRequest request, bool fallback, long? fence, CancellationToken cancellationToken);

    /// <summary>Ends the pool's expired leases (<c>reap_expired.sql</c> for one pool); how many.</summary>
    Task<int> ReapPoolAsync(string poolId, CancellationToken cancellationToken);
}

/// <summary>
/// One allocation call on SQL Server, in the PostgreSQL store's stages and names: the skip-locked
/// statement, fresh retries for requests that found only locked rows, then the blocking statement
/// one request at a time (the strict strategy goes there at once); requests that found no
/// capacity get one more try after the pool's expired leases are ended (#5).
/// </summary>
/// <remarks>
/// Issue 12 on this store: each request is decided once its statement committed and reported
/// through <c>onCommitted</c> at once (#1); once anything committed, a later failure answers the
/// undecided requests <see cref="AllocationStatus.Unavailable"/> (outcome unknown unless the error
/// says nothing was written) instead of throwing; no retry or blocking statement starts for a
/// request past its <see cref="AllocationRequest.Deadline"/>; a blocking statement whose rows
/// stayed locked past the lock timeout answers only its own request Unavailable (ADR 0007).
/// </remarks>
internal sealed class AllocationStages(IAllocationStatements statements, SqlServerWorkerStoreOptions options, TimeProvider time, Func<TimeSpan> jitter)
{
    /// <summary>How often one call follows the pool's strategy to the other script before giving up.</summary>
    internal const int MaxStrategySwitches = 3;

    /// <param name="strict">The strategy the settings cache knows; a script that finds the other one raises 50412 and the rest of the call follows it.</param>
    /// <param name="strategyChanged">Told when a script found the other strategy (drops the cached settings).</param>
    /// <param name="fence">The grain activation's fence every statement checks (issue 47); <see langword="null"/>: none.</param>
    /// <returns><see langword="null"/> when the fence was stale before anything was decided (nothing written).</returns>
    public async Task<IReadOnlyList<AllocationOutcome>?> RunAsync(string poolId, bool strict, IReadOnlyList<AllocationRequest> requests, long? fence, Action<int, AllocationOutcome>? onCommitted, Action strategyChanged, CancellationToken cancellationToken)
    {
        var batch = new AllocationBatch(requests, onCommitted) { Fence = fence };
        try
        {
            strict = await RunStagesAsync(poolId, strict, batch, [.. Enumerable.Range(0, requests.Count)], strategyChanged, cancellationToken);

            // An expired lease holds no capacity, whether or not the reaper has run (#5): when a
            // request found none, end this pool's expired leases and try it once more, unless its
            // caller has given up (its deadline passed: it keeps its "no capacity", nothing runs).
            var now = time.GetUtcNow();
            var full = batch.Undecided(AllocationStatus.NoCapacity).Where(i => !(requests[i].Deadline <= now)).ToList();
            if (full.Count > 0 && await statements.ReapPoolAsync(poolId, cancellationToken) > 0)
            {
                batch.Reopen(full);
                await RunStagesAsync(poolId, strict, batch, full, strategyChanged, cancellationToken);
            }
        }
        catch (AllocationBatch.FenceStaleException) when (!batch.AnyCommitted)
        {
            return null; // a later activation claimed the pool: nothing was written
        }
        catch (Exception ex) when (batch.AnyCommitted)
        {
            // Committed work is reported, never thrown away (#1): the requests this failure left
            // undecided answer Unavailable; their outcome is unknown unless the error says the
            // statement rolled back (or never ran, or found the fence stale).
            var unknown = ex is not (AllocatorException { OutcomeUnknown: false } or AllocationBatch.FenceStaleException);
            Activity.Current?.AddEvent(new ActivityEvent("allocator.batch_failed_after_commit", tags: new ActivityTagsCollection { ["exception.type"] = ex.GetType().Name }));
            batch.DecideRest(AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, batch.Retries), unknown));
        }

        return batch.Complete();
    }

    /// <summary>
    /// The stages for the requests at <paramref name="indexes"/>. A script that finds the pool on
    /// the other strategy (50412) wrote nothing: the requests still open run the other way.
    /// </summary>
    /// <returns>The strategy the stages ended on (strict or not).</returns>
    private async Task<bool> RunStagesAsync(string poolId, bool strict, AllocationBatch batch, List<int> indexes, Action strategyChanged, CancellationToken cancellationToken)
    {
        for (var switches = 0; ; switches++)
        {
            try
            {
                if (strict)
                {
                    await AllocateBlockingAsync(poolId, batch, indexes, fallback: false, cancellationToken);
                }
                else
                {
                    await AllocateSkipLockedAsync(poolId, batch, indexes, cancellationToken);
                }

                return strict;
            }
            catch (StrategyChangedException ex)
            {
                strategyChanged();
                if (switches == MaxStrategySwitches)
                {
                    throw new AllocatorException(AllocatorErrorKind.Unavailable,
                        "The pool's allocation strategy kept changing during the call; nothing was written for the requests left.", outcomeUnknown: false, ex);
                }

                strict = !strict;
                indexes = [.. indexes.Where(batch.IsOpen)];
            }
        }
    }

    /// <summary>
    /// The skip-locked statement, then fresh ones after a jitter for the requests that found only
    /// locked rows (<see cref="SqlServerWorkerStoreOptions.SkipRetries"/>), then the blocking
    /// fallback. No retry or fallback statement starts for a request past its deadline: it
    /// answers Unavailable, nothing written.
    /// </summary>
    private async Task AllocateSkipLockedAsync(string poolId, AllocationBatch batch, List<int> indexes, CancellationToken cancellationToken)
    {
        var pending = indexes;
        while (true)
        {
            pending = await AllocateOnceAsync(poolId, batch, pending, cancellationToken);
            pending = batch.DropPastDeadline(pending, time.GetUtcNow());
            if (pending.Count == 0)
            {
                return;
            }

            if (batch.Retries == options.SkipRetries)
            {
                // Last resort, in statements of their own: wait for the true least-loaded rows.
                await AllocateBlockingAsync(poolId, batch, pending, fallback: true, cancellationToken);
                return;
            }

            batch.Retries++;
            await Task.Delay(jitter(), time, cancellationToken);
        }
    }

    /// <summary>
    /// One skip-locked statement for the requests at <paramref name="indexes"/>; decides their
    /// outcomes once it has committed and returns the indexes that found only locked rows.
    /// </summary>
    private async Task<List<int>> AllocateOnceAsync(string poolId, AllocationBatch batch, List<int> indexes, CancellationToken cancellationToken)
    {
        var rows = await statements.SkipLockedAsync(poolId, batch.Requests, indexes, batch.Fence, cancellationToken);
        if (rows.Count == 0 && batch.Fence is not null)
        {
            throw new AllocationBatch.FenceStaleException();
        }

        var pending = new List<int>();
        foreach (var row in rows)
        {
            if (row.Status == AllocationRow.OnlyLocked)
            {
                pending.Add(row.Index);
            }
            else
            {
                batch.Decide(row.Index, ToOutcome(row, blocking: false, batch.Retries));
            }
        }

        return pending;
    }

    /// <summary>
    /// The blocking statements for the requests still undecided: <b>one request per statement</b>,
    /// in request order, so a statement waiting for a row lock holds no other worker row of its own
    /// and blocking allocations cannot wait on each other in a cycle (#6). Each wait is bounded by
    /// the lock timeout and the statement's budget, and no statement starts for a request past its
    /// deadline. A statement that failed with nothing written (its rows stayed locked past the lock
    /// timeout, its budget ran out, no connection could be opened) answers only its own request
    /// <see cref="AllocationStatus.Unavailable"/> (ADR 0007).
    /// </summary>
    private async Task AllocateBlockingAsync(string poolId, AllocationBatch batch, List<int> pending, bool fallback, CancellationToken cancellationToken)
    {
        foreach (var index in pending)
        {
            if (batch.DropPastDeadline([index], time.GetUtcNow()).Count == 0)
            {
                continue;
            }

            try
            {
                var row = await statements.BlockingAsync(poolId, batch.Requests[index], fallback, batch.Fence, cancellationToken)
                    ?? throw new AllocationBatch.FenceStaleException();
                batch.Decide(index, ToOutcome(row, blocking: true, batch.Retries));
            }
            catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.Unavailable && !ex.OutcomeUnknown && !cancellationToken.IsCancellationRequested)
            {
                batch.DecideIfOpen(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, true, batch.Retries)));
            }
        }
    }

    internal static AllocationOutcome ToOutcome(AllocationRow row, bool blocking, int retries) => row.Status switch
    {
        AllocationRow.Allocated => new AllocationOutcome(AllocationStatus.Allocated, row.Allocation, new AllocationDecision(row.Rank, row.ExcessScore, row.Rank, blocking, retries)),
        AllocationRow.Existing => new AllocationOutcome(AllocationStatus.Existing, row.Allocation, new AllocationDecision(0, 0, 0, blocking, retries)),
        AllocationRow.NoCapacity => AllocationOutcome.NoCapacity(new AllocationDecision(0, 0, 0, blocking, retries)),
        _ => throw new InvalidOperationException($"Allocation status {row.Status} is not an outcome."),
    };
}

/// <summary>The pool's strategy differs from the cached one; the allocation re-runs the other way.</summary>
internal sealed class StrategyChangedException(Exception inner) : Exception("The pool's allocation strategy changed.", inner);
