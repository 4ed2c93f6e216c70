using System.Diagnostics;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>
/// A pool grain's allocation batches: admits each request its queue takes for a batch, runs the
/// batch in the store and settles every caller in it: answered (as soon as its own statement
/// committed, when the store says so), parked to wait for capacity, or, when its caller gave up in
/// the store, its allocation released unless a request for its key claimed it. The rules of each
/// step are <see cref="AllocationRules"/>'s; this class applies them to the grain's parts.
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: called from the grain's
/// turns only, and its awaits come back to them. The one exception is the store's word that a
/// statement committed, which arrives on the store's thread and goes on in a turn posted through
/// the grain's post (<see cref="TurnInbox{T}"/>).
/// </remarks>
internal sealed class AllocationBatchRunner
{
    private readonly string _poolId;
    private readonly IWorkerStore _store;
    private readonly GrainOptions _options;
    private readonly TimeProvider _time;
    private readonly KnownPoolSettings _settings;
    private readonly CallerReplies _replies;
    private readonly AbandonedKeys _abandoned;
    private readonly GroupCommitQueue<PendingAllocation> _allocations;
    private readonly CapacityWaiters _waiters;
    private readonly ReleaseBatchRunner _releases;
    private readonly PoolActivationFence _fence;
    private readonly ActivationStage _stage;
    private readonly Action _poolMissing;
    private readonly Action _superseded;
    private readonly Action _leaveIfAsked;
    private readonly CancellationToken _stopping;
    private readonly TurnInbox<(PendingAllocation Pending, AllocationOutcome Outcome, int BatchSize)> _committedEarly;

    /// <param name="allocations">The grain's allocation queue, which runs its batches here.</param>
    /// <param name="releases">Releases what callers that gave up in the store leave behind.</param>
    /// <param name="fence">This activation's claim on the pool, taken before its first batch.</param>
    /// <param name="post">Queues an action as a turn of the grain.</param>
    /// <param name="poolMissing">The store said the pool does not exist.</param>
    /// <param name="superseded">The store refused a batch: a later activation of the pool has claimed it (issue 47).</param>
    /// <param name="leaveIfAsked">A batch settled: the grain leaves now if it was asked to once idle.</param>
    /// <param name="stopping">Canceled when Orleans stops waiting for the grain: store calls end.</param>
    public AllocationBatchRunner(
        string poolId,
        IWorkerStore store,
        GrainOptions options,
        TimeProvider time,
        KnownPoolSettings settings,
        CallerReplies replies,
        AbandonedKeys abandoned,
        GroupCommitQueue<PendingAllocation> allocations,
        CapacityWaiters waiters,
        ReleaseBatchRunner releases,
        PoolActivationFence fence,
        ActivationStage stage,
        Action<Action> post,
        Action poolMissing,
        Action superseded,
        Action leaveIfAsked,
        CancellationToken stopping)
    {
        _poolId = poolId;
        _store = store;
        _options = options;
        _time = time;
        _settings = settings;
        _replies = replies;
        _abandoned = abandoned;
        _allocations = allocations;
        _waiters = waiters;
        _releases = releases;
        _fence = fence;
        _stage = stage;
        _poolMissing = poolMissing;
        _superseded = superseded;
        _leaveIfAsked = leaveIfAsked;
        _stopping = stopping;
        _committedEarly = new(post, item => SettleCommittedEarly(item.Pending, item.Outcome, item.BatchSize));
    }

    /// <summary>The queue's admission: whether a request taken for a batch goes to the store.</summary>
    public bool Admit(PendingAllocation pending)
    {
        var admission = AllocationRules.Admit(pending, _time.GetUtcNow());
        if (admission == Admission.Go)
        {
            // Checked again here: a release of an abandoned allocation of its key may have started
            // since it arrived (it queued behind a batch in flight). It waits for that release.
            if (_abandoned.Claim(AllocationRules.ClaimKey(pending.Request), () => Resume(pending)))
            {
                pending.LeaveStore();
                _waiters.WokenReturned(pending, stillNoCapacity: false);
                return false;
            }

            _abandoned.EnteredStore(AllocationRules.ClaimKey(pending.Request));
            return true;
        }

        _waiters.WokenReturned(pending, stillNoCapacity: false);
        ReleaseIfUnclaimed(AllocationRules.ClaimKey(pending.Request));
        if (admission == Admission.PastCallDeadline)
        {
            _replies.Fail(pending, GrainErrors.CallTimedOut(_options.CallTimeout + pending.MaxWait, nothingWritten: true));
        }
        else if (admission == Admission.WaitEnded)
        {
            _replies.Answer(pending, pending.LastOutcome!, batchSize: 0);
        }

        return false;
    }

    /// <summary>A request held back by <see cref="AbandonedKeys"/> goes on.</summary>
    public void Resume(PendingAllocation pending)
    {
        if (_stage.Stopping)
        {
            _replies.Fail(pending, _stage.StopAnswer());
        }
        else
        {
            _allocations.Enqueue(pending); // one whose caller gave up meanwhile is dropped at admission
        }
    }

    /// <summary>The queue's batch runner: sends the batch, settles each caller; never throws.</summary>
    /// <returns>The store time, or <see langword="null"/> when the store call failed.</returns>
    public async Task<TimeSpan?> RunAsync(PendingAllocation[] batch)
    {
        var requests = new AllocationRequest[batch.Length];
        List<ActivityLink> links = [];
        ActivityContext parent = default;
        var started = _time.GetTimestamp();
        for (var i = 0; i < batch.Length; i++)
        {
            requests[i] = AllocationRules.ForStore(batch[i], _options.FallbackLease);
            batch[i].BatchStarted = started;
            batch[i].Settled = false; // a woken waiter comes back for another batch
            if (batch[i].Span is { } span)
            {
                links.Add(new ActivityLink(span.Context));
                parent = parent == default ? span.Context : parent;
            }
        }

        var changesAtStart = _waiters.CapacityChanges;
        GrainTelemetry.BatchSize.Record(batch.Length, _replies.PoolTag);

        // The batch span is a child of the first caller it serves and links all of them, so one
        // allocation reads HTTP → grain → batch → SQL and every caller finds its batch.
        using var batchSpan = StoreBatchSpan.Start(GrainTelemetry.BatchSpan, parent, links, _poolId, _store.Name, batch.Length, _allocations.Limit.Current);
        if (_settings.Current is { } known)
        {
            batchSpan?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(known.Strategy));
        }

        IReadOnlyList<AllocationOutcome> outcomes;
        TimeSpan storeTime;
        try
        {
            try
            {
                // Nothing this activation answers may be undone by an earlier one that wakes, and
                // once a later one has claimed the pool, this one allocates nothing more (issue 47).
                var fence = await StoreBatchSpan.CallStore(batchSpan, () => _fence.EnsureAsync(_stopping));
                void Committed(int index, AllocationOutcome outcome) => OnCommitted(batch[index], outcome, batch.Length);
                outcomes = fence > 0
                    ? await StoreBatchSpan.CallStore(batchSpan, () => _store.AllocateFencedAsync(_poolId, requests, fence, Committed, _stopping))
                        ?? throw GrainErrors.Superseded()
                    : await StoreBatchSpan.CallStore(batchSpan, () => _store.AllocateAsync(_poolId, requests, Committed, _stopping));
            }
            finally
            {
                storeTime = _time.GetElapsedTime(started);
                GrainTelemetry.BatchDuration.Record(storeTime.TotalSeconds, _replies.PoolTag);
            }

            if (outcomes.Count != batch.Length)
            {
                throw new InvalidOperationException($"The store answered {outcomes.Count} outcomes for a batch of {batch.Length}.");
            }
        }
        catch (Exception ex)
        {
            batchSpan?.SetStatus(ActivityStatusCode.Error, ex.Message);
            batchSpan?.AddException(ex);
            if (ex is AllocatorException { Kind: AllocatorErrorKind.NotFound })
            {
                _poolMissing(); // deleted, or never created
            }

            foreach (var pending in batch)
            {
                _waiters.WokenReturned(pending, stillNoCapacity: true);
                if (!pending.Settled)
                {
                    pending.Settled = true;
                    LeftStore(pending, outcome: null);
                }

                _replies.Fail(pending, ex);
            }

            AfterBatch(parkedAny: false, changesAtStart);
            if (ex is PoolGrainMovedException)
            {
                _superseded(); // after this batch's callers heard "moved": the rest hear it as the activation stops
            }

            return null;
        }

        if (batch.Any(p => !p.IsDone && p.MaxWait > TimeSpan.Zero && p.WaitDeadline is null)
            && outcomes.Any(o => o.Status == AllocationStatus.NoCapacity))
        {
            await _settings.EnsureAsync();
        }

        var parkedAny = false;
        var now = _time.GetUtcNow();
        for (var i = 0; i < batch.Length; i++)
        {
            var pending = batch[i];
            var outcome = outcomes[i];
            var settlement = AllocationRules.Settle(pending, outcome, () => AllocationRules.MayWait(pending, _settings.Current, now));
            if (settlement == Settlement.AlreadySettled)
            {
                continue; // answered as soon as its own statement committed
            }

            pending.Settled = true;
            _waiters.WokenReturned(pending, stillNoCapacity: outcome.Status == AllocationStatus.NoCapacity);
            LeftStore(pending, outcome);
            switch (settlement)
            {
                case Settlement.CallerGone:
                    break; // LeftStore released what it allocated, unless a request for its key claimed it
                case Settlement.Park when _stage.Stopping:
                    _replies.Fail(pending, _stage.StopAnswer()); // it found no capacity and would wait: nothing was written for it
                    break;
                case Settlement.Park:
                    pending.LeaveStore(); // parked in memory: a cancellation now leaves nothing behind
                    _waiters.Park(pending, outcome);
                    parkedAny = true;
                    break;
                default:
                    Answer(pending, outcome, batch.Length);
                    break;
            }
        }

        if (parkedAny)
        {
            // Someone just found no capacity: wake again only on news of a change.
            _waiters.OnFoundNoCapacity();
        }

        AfterBatch(parkedAny, changesAtStart);
        return storeTime;
    }

    /// <summary>
    /// The store says a request's own statement committed (from the store's thread, while later
    /// statements of the batch, retries or the blocking fallback, may still run): an allocation is
    /// answered at once instead of when the whole batch returns. Other outcomes (no capacity,
    /// which may park the caller) wait for the batch.
    /// </summary>
    private void OnCommitted(PendingAllocation pending, AllocationOutcome outcome, int batchSize)
    {
        if (outcome.Status is AllocationStatus.Allocated or AllocationStatus.Existing)
        {
            _committedEarly.Add((pending, outcome, batchSize));
        }
    }

    private void AfterBatch(bool parkedAny, long changesAtStart)
    {
        _leaveIfAsked();
        _waiters.AfterBatch(parkedAny, changesAtStart);
    }

    private void SettleCommittedEarly(PendingAllocation pending, AllocationOutcome outcome, int batchSize)
    {
        if (pending.Settled)
        {
            return; // its batch returned first and answered it
        }

        pending.Settled = true;
        _waiters.WokenReturned(pending, stillNoCapacity: false);
        LeftStore(pending, outcome);
        if (!pending.GaveUp)
        {
            Answer(pending, outcome, batchSize);
        }
    }

    private void Answer(PendingAllocation pending, AllocationOutcome outcome, int batchSize)
    {
        if (outcome is { Status: AllocationStatus.Existing, Allocation: { } existing })
        {
            _abandoned.AnsweredExisting(AllocationRules.ClaimKey(pending.Request), existing, _time.GetUtcNow());
        }

        _replies.Answer(pending, outcome, batchSize);
    }

    /// <summary>
    /// A request is back from the store (decided, failed or parked). When its caller gave up while
    /// it was there and it allocated, the grain releases that allocation, rather than leave it taken
    /// until its lease expires, unless a request for the same key has claimed it
    /// (<see cref="AbandonedKeys"/>). An existing allocation returned for a replayed key is left
    /// alone: it was made for an earlier call.
    /// </summary>
    /// <param name="outcome"><see langword="null"/> when the batch failed.</param>
    private void LeftStore(PendingAllocation pending, AllocationOutcome? outcome)
    {
        var key = AllocationRules.ClaimKey(pending.Request);
        if (_abandoned.Settled(key, pending.GaveUp, outcome) is { } abandoned)
        {
            _releases.ReleaseAbandoned(key, abandoned);
            return;
        }

        ReleaseIfUnclaimed(key);
    }

    /// <summary>
    /// Releases what <paramref name="key"/>'s requests allocated for callers that all gave up
    /// (<see cref="AbandonedKeys.Unclaimed"/>), unless a request for the key whose caller still
    /// waits is queued or parked: that one will be answered it. Called when one of the key's
    /// requests leaves the store, or goes without reaching it.
    /// </summary>
    public void ReleaseIfUnclaimed(string key)
    {
        if (!_abandoned.HasUnheard(key)
            || _allocations.QueuedItems.Concat(_waiters.Parked).Any(p => !p.IsDone && AllocationRules.ClaimKey(p.Request) == key))
        {
            return;
        }

        if (_abandoned.Unclaimed(key) is { } unheard)
        {
            _releases.ReleaseAbandoned(key, unheard);
        }
    }
}
