using Allocator.Storage.Internal;

namespace Allocator.Storage.InMemory.Internal;

/// <summary>
/// Allocation in the in-memory store: the skip-locked pass ("statement"), fresh passes for
/// requests that found only locked rows, then the blocking wait for the true least-loaded row
/// (the strict strategy goes there at once), and one more try after the pool's expired leases
/// are ended.
/// </summary>
/// <remarks>
/// Row locks held by "other transactions" are modelled by a semaphore per worker: a pass skips a
/// worker whose semaphore is taken; the blocking wait waits for it outside the monitor, bounded
/// by <see cref="InMemoryWorkerStoreOptions.LockTimeout"/>.
/// </remarks>
internal sealed class InMemoryAllocations(InMemoryStoreContext context, InMemoryLeases leases)
{
    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken) =>
        (await AllocateAsync(poolId, requests, fence: null, cancellationToken).ConfigureAwait(false))!;

    /// <param name="fence">The grain activation's fence every pass checks (each pass stands for a statement); <see langword="null"/>: none.</param>
    /// <returns><see langword="null"/> when the fence was stale before anything was decided (nothing written).</returns>
    public async Task<IReadOnlyList<AllocationOutcome>?> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long? fence, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);
        var outcomes = new AllocationOutcome?[requests.Count];
        AllocationStrategy strategy;
        lock (context.Sync)
        {
            strategy = context.FindPool(poolId).Settings.Strategy;
        }

        try
        {
            await RunStagesAsync(poolId, strategy, requests, outcomes, [.. Enumerable.Range(0, requests.Count)], fence, cancellationToken).ConfigureAwait(false);

            // An expired lease holds no capacity, reaped or not: end the pool's expired leases and try
            // the requests that found none once more (as the database stores do).
            var full = Enumerable.Range(0, requests.Count).Where(i => outcomes[i]!.Status == AllocationStatus.NoCapacity).ToList();
            if (full.Count > 0 && leases.ReapPool(poolId) > 0)
            {
                foreach (var index in full)
                {
                    outcomes[index] = null;
                }

                await RunStagesAsync(poolId, strategy, requests, outcomes, full, fence, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (FenceStaleException)
        {
            // A later activation claimed the pool: nothing more is allocated (issue 47).
            if (outcomes.All(o => o is null))
            {
                return null;
            }

            for (var i = 0; i < outcomes.Length; i++)
            {
                outcomes[i] ??= AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, 0));
            }
        }

        return outcomes!;
    }

    /// <summary>Throws when a pass must not allocate: <paramref name="fence"/> is no longer the pool's activation fence.</summary>
    private static void EnsureFence(PoolData pool, long? fence)
    {
        if (fence is { } value && pool.Activation != value)
        {
            throw new FenceStaleException();
        }
    }

    private async Task RunStagesAsync(string poolId, AllocationStrategy strategy, IReadOnlyList<AllocationRequest> requests, AllocationOutcome?[] outcomes, List<int> indexes, long? fence, CancellationToken cancellationToken)
    {
        if (strategy != AllocationStrategy.SkipLocked)
        {
            foreach (var i in indexes)
            {
                outcomes[i] = await AllocateBlockingAsync(poolId, requests, i, retries: 0, fence, cancellationToken).ConfigureAwait(false);
            }

            return;
        }

        // One pass is one "statement". A request left unanswered found eligible rows that were
        // merely locked: retry in a fresh pass after a jitter, then fall back to blocking; none of
        // that for a request past its deadline (Unavailable, nothing written).
        var retries = 0;
        while (true)
        {
            var pending = RunSkipLockedPass(poolId, requests, outcomes, retries, fence);
            var now = context.Time.GetUtcNow();
            foreach (var index in pending.Where(i => requests[i].Deadline <= now).ToList())
            {
                outcomes[index] = AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, retries));
                pending.Remove(index);
            }

            if (pending.Count == 0)
            {
                return;
            }

            if (retries == context.Options.SkipRetries)
            {
                foreach (var index in pending)
                {
                    outcomes[index] = await AllocateBlockingAsync(poolId, requests, index, retries, fence, cancellationToken).ConfigureAwait(false);
                }

                return;
            }

            retries++;
            await Task.Delay(Jitter(), context.Time, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// One non-blocking pass over the requests still unanswered. Returns the indexes of requests
    /// that found no unlocked row although a locked eligible row with room exists.
    /// </summary>
    private List<int> RunSkipLockedPass(string poolId, IReadOnlyList<AllocationRequest> requests, AllocationOutcome?[] outcomes, int retries, long? fence)
    {
        var pending = new List<int>();
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            EnsureFence(pool, fence);
            var now = context.Time.GetUtcNow();
            for (var i = 0; i < requests.Count; i++)
            {
                if (outcomes[i] is not null)
                {
                    continue;
                }

                var request = requests[i];
                if (FindByKey(pool, StoredSessionKey.Of(request), now) is { } existing)
                {
                    outcomes[i] = new AllocationOutcome(AllocationStatus.Existing, existing, new AllocationDecision(0, 0, 0, false, retries));
                    continue;
                }

                var candidates = EligibleCandidates(pool, request, now);
                if (candidates.Count == 0)
                {
                    outcomes[i] = AllocationOutcome.NoCapacity(new AllocationDecision(0, 0, 0, false, retries));
                    continue;
                }

                var chosen = -1;
                for (var c = 0; c < candidates.Count; c++)
                {
                    if (candidates[c].RowLock.CurrentCount > 0)
                    {
                        chosen = c;
                        break;
                    }
                }

                if (chosen < 0)
                {
                    pending.Add(i);
                    continue;
                }

                var decision = new AllocationDecision(chosen, Math.Abs(candidates[chosen].Score - candidates[0].Score), chosen, false, retries);
                outcomes[i] = new AllocationOutcome(AllocationStatus.Allocated, Allocate(pool, candidates[chosen], request, now), decision);
            }

        }

        return pending;
    }

    /// <summary>
    /// Waits for the lock of the true least-loaded eligible worker (no skipping), then allocates
    /// on it. Used by the strict strategy and as the skip-locked strategy's last resort.
    /// </summary>
    private async Task<AllocationOutcome> AllocateBlockingAsync(
        string poolId, IReadOnlyList<AllocationRequest> requests, int index, int retries, long? fence, CancellationToken cancellationToken)
    {
        var request = requests[index];
        var deadline = context.Time.GetUtcNow() + context.Options.LockTimeout;
        while (true)
        {
            WorkerRow target;
            lock (context.Sync)
            {
                var pool = context.FindPool(poolId);
                EnsureFence(pool, fence);
                if (FindByKey(pool, StoredSessionKey.Of(request), context.Time.GetUtcNow()) is { } existing)
                {
                    return new AllocationOutcome(AllocationStatus.Existing, existing, new AllocationDecision(0, 0, 0, true, retries));
                }

                var candidates = EligibleCandidates(pool, request, context.Time.GetUtcNow());
                if (candidates.Count == 0)
                {
                    return AllocationOutcome.NoCapacity(new AllocationDecision(0, 0, 0, true, retries));
                }

                target = candidates[0];
                if (target.RowLock.CurrentCount > 0)
                {
                    var outcome = Allocate(pool, target, request, context.Time.GetUtcNow());
                    return new AllocationOutcome(AllocationStatus.Allocated, outcome, new AllocationDecision(0, 0, 0, true, retries));
                }
            }

            // Wait outside the monitor, as a blocked statement waits without holding anything else.
            var remaining = deadline - context.Time.GetUtcNow();
            if (remaining <= TimeSpan.Zero || !await target.RowLock.WaitAsync(remaining, cancellationToken).ConfigureAwait(false))
            {
                // Answer this request alone: other requests of the batch may already be committed.
                return new AllocationOutcome(AllocationStatus.Unavailable, null, new AllocationDecision(0, 0, 0, true, retries));
            }

            target.RowLock.Release();
        }
    }

    private static List<WorkerRow> EligibleCandidates(PoolData pool, AllocationRequest request, DateTimeOffset now)
    {
        var freshAfter = pool.Settings.HeartbeatTimeout is { } timeout ? now - timeout : DateTimeOffset.MinValue;
        var candidates = new List<WorkerRow>();
        foreach (var row in pool.Workers.Values)
        {
            if (row.State == WorkerState.Available
                && row.LastHeartbeat >= freshAfter
                && row.Capacity - row.Load >= request.Units
                && (request.RequiredTags is null || request.RequiredTags.All(row.Tags.Contains)))
            {
                candidates.Add(row);
            }
        }

        // Spread: the least-loaded first, ties by worker id. Pack: the exact reverse (the most-loaded
        // first), as the stores' index read backwards gives it.
        var direction = pool.Settings.Placement == Placement.Pack ? -1 : 1;
        candidates.Sort((a, b) =>
        {
            var byScore = a.Score.CompareTo(b.Score);
            return direction * (byScore != 0 ? byScore : string.CompareOrdinal(a.WorkerId, b.WorkerId));
        });
        return candidates;
    }

    private Allocation Allocate(PoolData pool, WorkerRow row, AllocationRequest request, DateTimeOffset now)
    {
        var lease = request.Lease ?? pool.Settings.DefaultLease ?? request.FallbackLease;
        var allocation = new Allocation
        {
            AllocationId = Guid.CreateVersion7(now),
            PoolId = pool.PoolId,
            WorkerId = row.WorkerId,
            Address = row.Address,
            SessionKey = request.SessionKey,
            Owner = request.Owner,
            Units = request.Units,
            Epoch = context.NextEpoch(),
            CreatedAt = now,
            ExpiresAt = lease is { } l ? now + l : null,
        };
        row.Load += request.Units;
        pool.Allocations.Add(allocation.AllocationId, allocation);
        pool.ActiveBySession.Add(InMemoryStoreContext.KeyOf(allocation), allocation);
        return allocation;
    }

    /// <summary>
    /// The outcome a session key already has: its active allocation, or the one that ended within
    /// <see cref="InMemoryWorkerStoreOptions.HistoryRetention"/> (a replay never allocates twice).
    /// </summary>
    private Allocation? FindByKey(PoolData pool, string sessionKey, DateTimeOffset now) =>
        // An expired lease is over at the statement's clock, reaped or not: never answered as live.
        pool.ActiveBySession.TryGetValue(sessionKey, out var active) ? (active.ExpiresAt <= now ? active with { EndedAt = active.ExpiresAt, EndReason = AllocationEndReason.Expired } : active)
        : pool.EndedBySession.TryGetValue(sessionKey, out var ended) && ended.EndedAt > now - context.Options.HistoryRetention ? ended
        : null;

    private TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * context.Options.RetryJitter.Ticks));

    private sealed class FenceStaleException() : Exception("A later activation of the pool's grain has claimed the pool.");
}
