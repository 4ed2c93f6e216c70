namespace Allocator.Grains;

/// <summary>
/// Group commit for one grain: items (allocation requests, releases, registrations) gather in a
/// queue and go to the store together, one store call and one commit per batch, several batches
/// in flight as an <see cref="IBatchLimit"/> allows. A flush is scheduled behind the work already
/// queued for the grain, so an idle grain sends a lone item at once; while a quarter of the batch
/// slots or more are in flight the next one gathers, for the limit's <see cref="IBatchLimit.GatherWindow"/>
/// at least (when a delayed scheduler is given) or until a slot frees. With <see cref="StoreBatchSlots"/>
/// a batch also needs one of the silo's store slots: its items are chosen only once it has one,
/// and when only the last few are free it gathers for the longer <see cref="IBatchLimit.LastSlotsGatherWindow"/>.
/// </summary>
/// <remarks>
/// Single-threaded by contract: every member is called from the owning grain's turns (Orleans
/// runs one turn of an activation at a time), and the scheduled flush and the continuations of
/// <c>runBatch</c> come back to those turns. No locks, no thread-safety beyond that.
/// The owner answers its items inside <c>runBatch</c>; the queue only decides who goes when.
/// </remarks>
/// <typeparam name="TItem">One caller's item; compared by reference.</typeparam>
internal sealed class GroupCommitQueue<TItem>
    where TItem : class
{
    private readonly LinkedList<TItem> _pending = new();
    private readonly Dictionary<TItem, LinkedListNode<TItem>> _nodes = new(ReferenceEqualityComparer.Instance);
    private readonly HashSet<TItem[]> _inFlight = new(ReferenceEqualityComparer.Instance);
    private readonly HashSet<string> _exclusiveInFlight = new(StringComparer.Ordinal);
    private readonly HashSet<Task> _running = [];
    private readonly int _maxBatchSize;
    private readonly Action<Action> _schedule;
    private readonly Func<TItem[], Task<TimeSpan?>> _runBatch;
    private readonly Func<TItem, bool>? _admit;
    private readonly Func<TItem, string>? _exclusiveKey;
    private readonly Action<TimeSpan, Action>? _scheduleAfter;
    private readonly StoreBatchSlots? _slots;
    private readonly Action _slotGranted;
    private StoreBatchSlots.Place? _placeInLine;
    private bool _flushScheduled;
    private bool _gathering;
    private bool _flushing;
    private bool _flushAgain;
    private bool _stopped;

    /// <param name="maxBatchSize">Most items per batch.</param>
    /// <param name="limit">Batches in flight at once.</param>
    /// <param name="schedule">Queues an action as a turn of the owning grain, behind the work already queued.</param>
    /// <param name="runBatch">
    /// Sends one batch to the store and answers its items; returns the store time when the store
    /// call succeeded (it feeds <paramref name="limit"/>), null when it failed. Must not throw:
    /// it answers its items with the error instead.
    /// </param>
    /// <param name="admit">
    /// Called for each item as it is taken for a batch; false drops it (the owner has answered
    /// it, e.g. canceled or past its deadline). Default: every item goes.
    /// </param>
    /// <param name="exclusiveKey">
    /// Items with the same key never share a batch and never are in two batches in flight at once
    /// (registrations of one worker apply in arrival order); a held-back item keeps its place.
    /// </param>
    /// <param name="scheduleAfter">
    /// Queues an action as a turn of the owning grain after a delay; given, items that arrive
    /// while a quarter of the batch slots or more are in flight wait <see cref="IBatchLimit.GatherWindow"/>
    /// for company.
    /// </param>
    /// <param name="slots">
    /// The silo's store slots, shared with every other queue; a batch starts only with one, and
    /// gives it back when it ends. Null (or not <see cref="StoreBatchSlots.Limited"/>): no such bound.
    /// </param>
    public GroupCommitQueue(
        int maxBatchSize,
        IBatchLimit limit,
        Action<Action> schedule,
        Func<TItem[], Task<TimeSpan?>> runBatch,
        Func<TItem, bool>? admit = null,
        Func<TItem, string>? exclusiveKey = null,
        Action<TimeSpan, Action>? scheduleAfter = null,
        StoreBatchSlots? slots = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxBatchSize, 1);
        _maxBatchSize = maxBatchSize;
        Limit = limit;
        _schedule = schedule;
        _runBatch = runBatch;
        _admit = admit;
        _exclusiveKey = exclusiveKey;
        _scheduleAfter = scheduleAfter;
        _slots = slots is { Limited: true } ? slots : null;

        // Called on the thread that gave the slot back: only hop into a turn of the owner.
        _slotGranted = () => _schedule(Flush);
    }

    public IBatchLimit Limit { get; }

    /// <summary>Items waiting for a batch.</summary>
    public int Pending => _pending.Count;

    /// <summary>Batches handed to <c>runBatch</c> and not finished.</summary>
    public int InFlight => _inFlight.Count;

    /// <summary>The items waiting for a batch, in order.</summary>
    public IEnumerable<TItem> QueuedItems => _pending;

    /// <summary>The items of the batches in flight.</summary>
    public IEnumerable<TItem> InFlightItems => _inFlight.SelectMany(b => b);

    /// <summary>Adds an item behind the others and schedules a flush.</summary>
    public void Enqueue(TItem item)
    {
        ObjectDisposedException.ThrowIf(_stopped, this);
        _nodes.Add(item, _pending.AddLast(item));
        ScheduleFlush();
    }

    /// <summary>Puts items ahead of everything queued, in the order given (woken waiters go before new arrivals).</summary>
    public void EnqueueFirst(IReadOnlyList<TItem> items)
    {
        ObjectDisposedException.ThrowIf(_stopped, this);
        for (var i = items.Count - 1; i >= 0; i--)
        {
            _nodes.Add(items[i], _pending.AddFirst(items[i]));
        }

        ScheduleFlush();
    }

    /// <summary>Takes a queued item out (a caller gave up); false when it is not queued (in a batch, or gone).</summary>
    public bool Remove(TItem item)
    {
        if (!_nodes.Remove(item, out var node))
        {
            return false;
        }

        _pending.Remove(node);
        return true;
    }

    /// <summary>Whether the item waits in the queue (not yet in a batch).</summary>
    public bool IsQueued(TItem item) => _nodes.ContainsKey(item);

    /// <summary>Stops starting batches and hands back the queued items, for the owner to answer.</summary>
    public IReadOnlyList<TItem> Stop()
    {
        _stopped = true;
        if (_placeInLine is { } place)
        {
            _placeInLine = null;
            if (_slots!.Leave(place))
            {
                _slots.Return();
            }
        }

        TItem[] queued = [.. _pending];
        _pending.Clear();
        _nodes.Clear();
        return queued;
    }

    /// <summary>Completes when every batch in flight now has finished.</summary>
    public Task WhenInFlightDoneAsync() => Task.WhenAll([.. _running]);

    private void ScheduleFlush()
    {
        if (_stopped || _flushScheduled)
        {
            return;
        }

        // A quarter of the batch slots or more busy: gather a moment longer, as the callers a
        // finished batch answered come back close together (PostgreSQL's commit_delay with
        // commit_siblings), so that the slots do not run out on batches of one or two. With
        // fewer busy, an item goes at the next turn: a smaller batch is a shorter statement.
        // (From half on, storm-250's p99 doubled: bursts of small batches took every slot.)
        // Longer when the batch would take one of the silo's last free store slots: it holds it
        // for a whole store call, and the answered callers still on their way would otherwise
        // wait for the next slot to come back (AdaptiveBatchLimit.LastSlotsGatherWindow). The
        // windows are compared first: against a local database there is none, and no lock is taken.
        var window = _inFlight.Count * 4 >= Limit.Current && _scheduleAfter is not null && _pending.Count < _maxBatchSize
            ? Limit.LastSlotsGatherWindow > Limit.GatherWindow && _placeInLine is null && _slots is { LastFree: true }
                ? Limit.LastSlotsGatherWindow
                : Limit.GatherWindow
            : TimeSpan.Zero;
        if (window > TimeSpan.Zero)
        {
            if (!_gathering)
            {
                _gathering = true;
                _scheduleAfter!(window, () =>
                {
                    _gathering = false;
                    Flush();
                });
            }

            return;
        }

        _flushScheduled = true;
        _schedule(() =>
        {
            _flushScheduled = false;
            Flush();
        });
    }

    /// <summary>Starts batches while the limit allows and items wait.</summary>
    internal void Flush()
    {
        if (_flushing)
        {
            // A batch answered synchronously inside this loop: go round again instead of recursing.
            _flushAgain = true;
            return;
        }

        _flushing = true;
        try
        {
            do
            {
                _flushAgain = false;
                while (!_stopped && _pending.Count > 0 && Limit.MayStart(_inFlight.Count, _pending.Count >= _maxBatchSize) && HoldSlot())
                {
                    var batch = TakeBatch();
                    if (batch.Length == 0)
                    {
                        _slots?.Return();
                        break;
                    }

                    Start(batch);
                }
            }
            while (_flushAgain && !_stopped);

            // A slot handed over that this flush could not use (the limit is reached, or the
            // items went meanwhile) goes on to the next queue in line.
            if (_placeInLine is { } place && place.TakeGrant())
            {
                _placeInLine = null;
                _slots!.Return();
            }
        }
        finally
        {
            _flushing = false;
        }
    }

    /// <summary>
    /// A store slot for the next batch: one handed to this queue's place in line, or a free one;
    /// false while in line (a flush comes when a slot is handed over).
    /// </summary>
    private bool HoldSlot()
    {
        if (_slots is null)
        {
            return true;
        }

        if (_placeInLine is { } place)
        {
            if (!place.TakeGrant())
            {
                return false;
            }

            _placeInLine = null;
            return true;
        }

        if (_slots.TryTake(_slotGranted, out var newPlace))
        {
            return true;
        }

        _placeInLine = newPlace;
        return false;
    }

    private TItem[] TakeBatch()
    {
        List<TItem> batch = [];
        HashSet<string>? keys = _exclusiveKey is null ? null : new(StringComparer.Ordinal);
        var node = _pending.First;
        while (node is not null && batch.Count < _maxBatchSize)
        {
            var next = node.Next;
            var item = node.Value;
            if (keys is not null)
            {
                var key = _exclusiveKey!(item);
                if (_exclusiveInFlight.Contains(key) || keys.Contains(key))
                {
                    node = next; // held back: keeps its place for a later batch
                    continue;
                }

                Unlink(node);
                if (_admit is null || _admit(item))
                {
                    keys.Add(key);
                    batch.Add(item);
                }
            }
            else
            {
                Unlink(node);
                if (_admit is null || _admit(item))
                {
                    batch.Add(item);
                }
            }

            node = next;
        }

        return [.. batch];
    }

    private void Unlink(LinkedListNode<TItem> node)
    {
        _pending.Remove(node);
        _nodes.Remove(node.Value);
    }

    private void Start(TItem[] batch)
    {
        _inFlight.Add(batch);
        if (_exclusiveKey is not null)
        {
            foreach (var item in batch)
            {
                _exclusiveInFlight.Add(_exclusiveKey(item));
            }
        }

        var task = RunAsync(batch);
        if (!task.IsCompleted)
        {
            _running.Add(task);
            _ = task.ContinueWith(t => _running.Remove(t), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Current);
        }
    }

    private async Task RunAsync(TItem[] batch)
    {
        try
        {
            if (await _runBatch(batch) is { } storeTime)
            {
                Limit.Record(storeTime);
            }
        }
        finally
        {
            _inFlight.Remove(batch);
            if (_exclusiveKey is not null)
            {
                foreach (var item in batch)
                {
                    _exclusiveInFlight.Remove(_exclusiveKey(item));
                }
            }

            // After this queue's own books are straight: handing the slot on runs another
            // queue's callback on this thread.
            _slots?.Return();
            Flush();
        }
    }
}
