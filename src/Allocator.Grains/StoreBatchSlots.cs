namespace Allocator.Grains;

/// <summary>
/// The store batches one silo may have in flight at once, across every grain and every kind
/// (allocations, releases, registrations): the database connections they run on, less a reserve
/// for the statements that do not go through a grain (the reaper, settings reads, renewals).
/// </summary>
/// <remarks>
/// <para>A queue takes a slot before it chooses a batch's items. One that finds none waits in line
/// while its items keep gathering in the grain, so the batch it sends when a slot comes back is as
/// large as the wait made it. Without the slots, batches beyond the connections waited inside the
/// connection pool with their items already chosen: wide-250 (16 connections, 1,000 callers at
/// 250 ms) spent a median 29–33 ms of each batch waiting there for a connection, in batches of 55.
/// See docs/decisions/0025-batches-wait-in-the-grain-not-the-connection-pool.md.</para>
/// <para>Thread-safe: a slot comes back on whatever thread its batch ended. A slot that comes back
/// while queues wait goes to the first in line (first come, first served across the silo's
/// grains); that queue learns it through the callback it left, which must only schedule work.</para>
/// </remarks>
internal sealed class StoreBatchSlots
{
    private readonly object _gate = new();
    private readonly LinkedList<Place> _line = new();
    private readonly TimeProvider _time;
    private int _free;

    /// <param name="count">Slots; 0 or less: no limit (<see cref="Limited"/> is false).</param>
    /// <param name="time">Clock of the waits in line (<c>allocator.store.slot_wait</c>); the system's by default.</param>
    public StoreBatchSlots(int count, TimeProvider? time = null)
    {
        Count = Math.Max(0, count);
        _free = Count;
        _time = time ?? TimeProvider.System;
    }

    /// <summary>
    /// How many slots a silo has: as configured, or the store's connections less a quarter (at
    /// least 2) kept for the statements that do not go through a grain; 0 (no bound) when
    /// neither says.
    /// </summary>
    public static int CountFor(int configured, int? connectionLimit) =>
        configured > 0 ? configured
        : connectionLimit is { } connections ? Math.Max(1, connections - Math.Max(2, connections / 4))
        : 0;

    /// <summary>How many batches may be in flight at once; 0 when there is no limit.</summary>
    public int Count { get; }

    /// <summary>False: every batch may go (the store's connections are not known, or not limited).</summary>
    public bool Limited => Count > 0;

    /// <summary>Slots nobody holds.</summary>
    public int Free
    {
        get
        {
            lock (_gate)
            {
                return _free;
            }
        }
    }

    /// <summary>
    /// Only the last few slots are free (at least one, and at most a quarter of them or one): a
    /// batch that takes one now may be among the last to find one free for a while. False when
    /// none is free (a batch then waits in line and gathers there) or queues wait. wide-250 (12
    /// slots), one run each: the last slot alone 3,362 and 3,324 allocations/s in batches of 76,
    /// the last quarter 3,387/s in batches of 81.
    /// </summary>
    public bool LastFree
    {
        get
        {
            lock (_gate)
            {
                return _line.Count == 0 && _free > 0 && _free <= Math.Max(1, Count / 4);
            }
        }
    }

    /// <summary>Queues waiting for a slot.</summary>
    public int Waiting
    {
        get
        {
            lock (_gate)
            {
                return _line.Count;
            }
        }
    }

    /// <summary>
    /// Takes a slot when one is free and no queue waits before; otherwise joins the line and
    /// returns false with the <paramref name="place"/> held there: when a slot is handed to it,
    /// <see cref="Place.TakeGrant"/> turns true and <paramref name="granted"/> is called (on the
    /// thread that gave the slot back; it must only schedule work, and never throw).
    /// </summary>
    public bool TryTake(Action granted, out Place? place)
    {
        lock (_gate)
        {
            if (_free > 0 && _line.Count == 0)
            {
                _free--;
                place = null;
                return true;
            }

            place = new Place(granted, _time.GetTimestamp());
            place.Node = _line.AddLast(place);
            return false;
        }
    }

    /// <summary>Gives a slot back: to the first queue in line, or to the free ones.</summary>
    public void Return()
    {
        Place? next = null;
        lock (_gate)
        {
            if (_line.First is { } first)
            {
                _line.RemoveFirst();
                next = first.Value;
                next.Node = null;
                next.Grant();
            }
            else if (_free < Count)
            {
                _free++;
            }
            else
            {
                throw new InvalidOperationException("A store batch slot was given back that nobody held.");
            }
        }

        if (next is not null)
        {
            var waited = _time.GetElapsedTime(next.JoinedAt);
            next.Granted(); // the hand-over first: a metrics listener that throws must not lose a slot
            GrainTelemetry.StoreSlotWait.Record(waited.TotalSeconds);
        }
    }

    /// <summary>
    /// Leaves the line (a queue that stops): true when the place had already been handed a slot,
    /// which is then the caller's to give back.
    /// </summary>
    public bool Leave(Place place)
    {
        lock (_gate)
        {
            if (place.Node is { } node)
            {
                _line.Remove(node);
                place.Node = null;
            }
        }

        return place.TakeGrant();
    }

    /// <summary>A queue's place in line; holds the slot once it is handed over, until taken.</summary>
    internal sealed class Place(Action granted, long joinedAt)
    {
        private int _granted;

        internal LinkedListNode<Place>? Node { get; set; }

        internal Action Granted { get; } = granted;

        /// <summary>When the place joined the line (<see cref="TimeProvider.GetTimestamp"/>).</summary>
        internal long JoinedAt { get; } = joinedAt;

        /// <summary>True once, when a slot was handed to this place: the slot is the caller's from then on.</summary>
        public bool TakeGrant() => Interlocked.Exchange(ref _granted, 0) == 1;

        internal void Grant() => Volatile.Write(ref _granted, 1);
    }
}
