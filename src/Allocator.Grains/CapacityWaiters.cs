namespace Allocator.Grains;

/// <summary>
/// A pool grain's callers waiting in memory for capacity, and their deadlines: parks them, keeps
/// the grain's deadline timer due at the earliest deadline and answers those whose wait ended,
/// and wakes them (news of capacity, the periodic re-check) back into the allocation queue ahead
/// of new arrivals. Who waits and whom to wake is <see cref="WaiterQueue{T}"/>'s; this class adds
/// what the grain does around it: the timer, the answers and the <c>allocator.waiters</c> gauge.
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: the grain's turns only
/// (its timers run as interleaving turns). A cancellation reaches it through a turn the grain posts.
/// </remarks>
/// <param name="allocations">Where woken callers go, ahead of new arrivals.</param>
/// <param name="maxBatchSize">Most callers woken at once: one batch of them.</param>
internal sealed class CapacityWaiters(
    GroupCommitQueue<PendingAllocation> allocations,
    CallerReplies replies,
    ActivationStage stage,
    TimeProvider time,
    int maxBatchSize)
{
    private readonly WaiterQueue<PendingAllocation> _queue = new();
    private DateTimeOffset? _deadlineArmedFor;

    /// <summary>
    /// The grain's deadline timer (Orleans', registered by the grain with <see cref="ExpireAsync"/>
    /// as its callback); <see langword="null"/> once the grain dropped it: deadlines then arm nothing.
    /// </summary>
    public IGrainTimer? DeadlineTimer { get; set; }

    /// <summary>Callers parked now.</summary>
    public int Count => _queue.Count;

    /// <summary>The callers parked now, longest-waiting first.</summary>
    public IEnumerable<PendingAllocation> Parked => _queue.Parked;

    /// <summary>Capacity changes seen so far: a batch compares it before and after (<see cref="AfterBatch"/>).</summary>
    public long CapacityChanges => _queue.CapacityChanges;

    /// <summary>A caller found no capacity and may wait: parked at its arrival place until its wait deadline.</summary>
    public void Park(PendingAllocation pending, AllocationOutcome outcome)
    {
        if (pending is { Claim: { } claim, ClaimLease: > 0 })
        {
            // It tried under the claim and found no room: another pool it waits in may try now.
            claim.GiveBack(pending.ClaimLease);
            pending.ClaimLease = 0;
        }

        pending.LastOutcome = outcome;
        _queue.Park(pending, pending.Arrival, pending.WaitDeadline!.Value);
        GrainTelemetry.Waiters.Add(1, replies.PoolTag);
        replies.Demand?.Waiting(_queue.Count);
        ArmDeadlineTimer();
    }

    /// <inheritdoc cref="WaiterQueue{T}.WokenReturned"/>
    public bool WokenReturned(PendingAllocation pending, bool stillNoCapacity) => _queue.WokenReturned(pending, stillNoCapacity);

    /// <inheritdoc cref="WaiterQueue{T}.OnFoundNoCapacity"/>
    public void OnFoundNoCapacity() => _queue.OnFoundNoCapacity();

    /// <summary>An allocation batch has settled its callers; <paramref name="changesAtStart"/> is <see cref="CapacityChanges"/> when it started.</summary>
    public void AfterBatch(bool parkedAny, long changesAtStart)
    {
        // Capacity freed while the batch ran may postdate the statement that found none.
        if (parkedAny && _queue.CapacityChanges != changesAtStart)
        {
            _queue.RequestWake();
        }

        TryWake();
    }

    /// <summary>Capacity may have been freed (a release, registration, undrain, reap): wake the longest-waiting.</summary>
    public void OnCapacityChanged()
    {
        _queue.OnCapacityChanged();
        TryWake();
    }

    /// <summary>The deadline timer's callback: answers the callers whose wait has ended, then re-arms the timer.</summary>
    public Task ExpireAsync()
    {
        _deadlineArmedFor = null;
        var expired = _queue.TakeExpired(time.GetUtcNow());
        Unparked(expired.Count);
        foreach (var waiter in expired)
        {
            replies.Answer(waiter, waiter.LastOutcome ?? AllocationOutcome.NoCapacity(), batchSize: 0);
        }

        ArmDeadlineTimer();
        return Task.CompletedTask;
    }

    /// <summary>The re-check timer's callback.</summary>
    public Task RecheckAsync()
    {
        // The safety net for lost notifications (and stores that have none).
        _queue.RequestWake();
        TryWake();
        return Task.CompletedTask;
    }

    /// <summary>Sends the longest-waiting callers (one batch of them) back through the batcher, ahead of new arrivals.</summary>
    public void TryWake()
    {
        if (stage.Stopping)
        {
            return;
        }

        // A caller waiting in several pools goes to the store only with its claim (ADR 0036), which
        // it asks for on its own: woken alone, so that no later waiter overtakes it while it asks.
        var group = _queue.TakeWakeGroup(maxBatchSize, ClaimThen is null ? null : static p => p.Claim is not null);
        if (group.Count == 0)
        {
            return;
        }

        Unparked(group.Count);
        if (group is not [{ Claim: not null } claimed])
        {
            allocations.EnqueueFirst(group);
            return;
        }

        ClaimThen!(
            claimed,
            () => allocations.EnqueueFirst([claimed]),
            () =>
            {
                replies.Answer(claimed, AllocationOutcome.NoCapacity(), batchSize: 0);
                if (_queue.WokenReturned(claimed, stillNoCapacity: false))
                {
                    TryWake();
                }
            });
    }

    /// <summary>
    /// Asks a waiting caller's claim (<see cref="PendingAllocation.Claim"/>) and, in a turn of the
    /// grain, goes on (granted) or gives up (refused: served elsewhere, or over). Set by the grain.
    /// </summary>
    public Action<PendingAllocation, Action, Action>? ClaimThen { get; set; }

    /// <summary>
    /// A caller gave up (answered already): takes it out wherever it waits. A woken one still
    /// queued frees the way for the next group.
    /// </summary>
    public void Forget(PendingAllocation pending)
    {
        if (_queue.Remove(pending))
        {
            Unparked(1);
            ArmDeadlineTimer();
        }
        else if (allocations.Remove(pending) && _queue.WokenReturned(pending, stillNoCapacity: false))
        {
            TryWake();
        }
    }

    /// <summary>Unparks every caller (the grain is stopping), in arrival order, for the grain to answer.</summary>
    public IReadOnlyList<PendingAllocation> TakeAll()
    {
        var parked = _queue.TakeAll();
        Unparked(parked.Count);
        return parked;
    }

    private void Unparked(int count)
    {
        if (count > 0)
        {
            GrainTelemetry.Waiters.Add(-count, replies.PoolTag);
        }
    }

    private void ArmDeadlineTimer()
    {
        var next = _queue.NextDeadline;
        if (next == _deadlineArmedFor || DeadlineTimer is null)
        {
            return;
        }

        _deadlineArmedFor = next;
        var due = next is { } at ? at - time.GetUtcNow() : Timeout.InfiniteTimeSpan;
        DeadlineTimer.Change(next is null ? Timeout.InfiniteTimeSpan : due < TimeSpan.Zero ? TimeSpan.Zero : due, Timeout.InfiniteTimeSpan);
    }
}
