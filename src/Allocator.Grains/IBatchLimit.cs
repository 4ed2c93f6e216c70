namespace Allocator.Grains;

/// <summary>How many batches a <see cref="GroupCommitQueue{TItem}"/> may have in flight at once.</summary>
internal interface IBatchLimit
{
    /// <summary>Batches that may be in flight now.</summary>
    int Current { get; }

    /// <summary>Whether one more batch may start with <paramref name="inFlight"/> already running.</summary>
    /// <param name="fullBatchWaiting">A full batch is queued (waiting cannot make it larger).</param>
    bool MayStart(int inFlight, bool fullBatchWaiting);

    /// <summary>Takes the store time of one successful batch into account.</summary>
    void Record(TimeSpan storeTime);

    /// <summary>How long a new item waits for others before a batch starts, once a quarter of the slots are busy (zero: not at all).</summary>
    TimeSpan GatherWindow => TimeSpan.Zero;

    /// <summary>
    /// The same wait when the batch would take one of the silo's last free store slots
    /// (<see cref="StoreBatchSlots.LastFree"/>): a slot is held for a whole store call, so there
    /// the window covers the time the callers of an answered batch take to come back. Used when
    /// longer than <see cref="GatherWindow"/>.
    /// </summary>
    TimeSpan LastSlotsGatherWindow => TimeSpan.Zero;
}

/// <summary>A limit that does not adapt: whatever <c>current</c> answers at the moment (it may follow settings).</summary>
internal sealed class FixedBatchLimit(Func<int> current) : IBatchLimit
{
    public int Current => Math.Max(1, current());

    public bool MayStart(int inFlight, bool fullBatchWaiting) => inFlight < Current;

    public void Record(TimeSpan storeTime)
    {
    }
}
