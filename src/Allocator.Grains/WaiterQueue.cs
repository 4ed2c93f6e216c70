namespace Allocator.Grains;

/// <summary>
/// Callers waiting in memory for capacity, first come first served, each until its deadline;
/// and the rule of when to wake them. Single-threaded by contract (the owning grain's turns).
/// </summary>
/// <remarks>
/// Waking sends the longest-waiting group back through the batcher, ahead of new arrivals, so
/// that the store's water filling serves them in order. While a woken group is out, no other
/// group is woken. When some of a group still find no capacity, waking stops until news of a
/// change (<see cref="OnCapacityChanged"/>) or a re-check (<see cref="RequestWake"/>): without
/// that rule a full pool would spin, each batch of waiters finding nothing and waking the next.
/// </remarks>
/// <typeparam name="T">A waiting caller; compared by reference.</typeparam>
internal sealed class WaiterQueue<T>
    where T : class
{
    private readonly SortedDictionary<long, T> _byArrival = [];
    private readonly Dictionary<T, long> _arrivals = new(ReferenceEqualityComparer.Instance);
    private readonly PriorityQueue<T, DateTimeOffset> _deadlines = new();
    private readonly HashSet<T> _woken = new(ReferenceEqualityComparer.Instance);
    private bool _wakeRequested;
    private bool _wakeFailed;

    /// <summary>Callers parked now.</summary>
    public int Count => _byArrival.Count;

    /// <summary>Woken callers not yet back from their batch.</summary>
    public int WokenOutstanding => _woken.Count;

    /// <summary>Capacity changes seen so far: a batch compares it before and after, to learn of capacity freed while it ran.</summary>
    public long CapacityChanges { get; private set; }

    /// <summary>The earliest deadline among parked callers, or null when none waits.</summary>
    public DateTimeOffset? NextDeadline
    {
        get
        {
            // Lazy deletion: entries of callers no longer parked are dropped when they surface.
            while (_deadlines.TryPeek(out var waiter, out var deadline))
            {
                if (_arrivals.ContainsKey(waiter))
                {
                    return deadline;
                }

                _deadlines.Dequeue();
            }

            return null;
        }
    }

    public bool IsParked(T waiter) => _arrivals.ContainsKey(waiter);

    /// <summary>The callers parked now, longest-waiting first.</summary>
    public IEnumerable<T> Parked => _byArrival.Values;

    /// <summary>Parks a caller at its arrival position (an earlier caller parked again keeps its old place).</summary>
    public void Park(T waiter, long arrival, DateTimeOffset deadline)
    {
        _byArrival.Add(arrival, waiter);
        _arrivals.Add(waiter, arrival);
        _deadlines.Enqueue(waiter, deadline);
    }

    /// <summary>Takes a caller out (it gave up); false when it was not parked.</summary>
    public bool Remove(T waiter)
    {
        if (!_arrivals.Remove(waiter, out var arrival))
        {
            return false;
        }

        _byArrival.Remove(arrival);
        return true;
    }

    /// <summary>Unparks and returns the callers whose deadline is at or before <paramref name="now"/>, oldest deadline first.</summary>
    public IReadOnlyList<T> TakeExpired(DateTimeOffset now)
    {
        List<T> expired = [];
        while (_deadlines.TryPeek(out var waiter, out var deadline) && deadline <= now)
        {
            _deadlines.Dequeue();
            if (Remove(waiter))
            {
                expired.Add(waiter);
            }
        }

        return expired;
    }

    /// <summary>Unparks every caller (the grain is stopping), in arrival order.</summary>
    public IReadOnlyList<T> TakeAll()
    {
        T[] all = [.. _byArrival.Values];
        _byArrival.Clear();
        _arrivals.Clear();
        _deadlines.Clear();
        return all;
    }

    /// <summary>Capacity may have been freed (a release, registration, undrain, reap): wake when possible.</summary>
    public void OnCapacityChanged()
    {
        CapacityChanges++;
        _wakeRequested = true;
    }

    /// <summary>Wake even without news of a change (the periodic re-check, a safety net for lost notifications).</summary>
    public void RequestWake()
    {
        if (Count > 0)
        {
            _wakeRequested = true;
        }
    }

    /// <summary>A batch just parked callers after finding no capacity: wait for news before waking again.</summary>
    public void OnFoundNoCapacity() => _wakeFailed = true;

    /// <summary>
    /// When waking is due, unparks and returns up to <paramref name="max"/> of the longest-waiting
    /// callers, marked as woken; otherwise returns nothing.
    /// </summary>
    /// <param name="alone">
    /// Callers woken only by themselves: one ends the group before it, and is woken alone when it
    /// is the longest-waiting (a caller that must ask before it goes to the store, so that callers
    /// woken together cannot enter it in another order than they arrived).
    /// </param>
    public IReadOnlyList<T> TakeWakeGroup(int max, Func<T, bool>? alone = null)
    {
        if (_woken.Count > 0 || Count == 0 || (!_wakeRequested && _wakeFailed))
        {
            return [];
        }

        _wakeRequested = false;
        _wakeFailed = false;
        List<T> group = [];
        foreach (var waiter in _byArrival.Values)
        {
            if (group.Count == max)
            {
                break;
            }

            if (alone is not null && alone(waiter))
            {
                if (group.Count == 0)
                {
                    group.Add(waiter);
                }

                break;
            }

            group.Add(waiter);
        }

        foreach (var waiter in group)
        {
            Remove(waiter);
            _woken.Add(waiter);
        }

        return group;
    }

    /// <summary>
    /// A caller came back from the batch it was woken into (or left before it ran). False when it
    /// was not a woken caller.
    /// </summary>
    /// <param name="stillNoCapacity">It found no capacity again: stop waking until news of a change.</param>
    public bool WokenReturned(T waiter, bool stillNoCapacity)
    {
        if (!_woken.Remove(waiter))
        {
            return false;
        }

        _wakeFailed |= stillNoCapacity;
        return true;
    }
}
