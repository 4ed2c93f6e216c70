namespace Allocator.Grains;

/// <summary>
/// How many store batches of one kind a pool grain starts while others are in flight: between 1
/// and <see cref="GrainOptions.MaxBatchesInFlight"/>, adapted to how long batches take. Touched
/// only inside the grain's turns.
/// </summary>
/// <remarks>
/// <para>
/// Batches in flight buy overlap of round trips. Where the database is far away, a batch spends
/// most of its time on the network, and more batches in flight serve more callers. Where the
/// database's CPU is the bottleneck, more batches in flight only split the same requests into
/// smaller statements that queue inside the database, each paying the fixed cost of a statement
/// and a commit: at loopback on 2 cores, 16 in flight made batches of 6 requests and 1,436
/// allocate+release steps/s, 1 in flight batches of 24 and 3,528/s (same machine, one run each).
/// </para>
/// <para>
/// The sign of the second case is batches taking far longer than the quickest recent batch
/// (delay-based, after TCP Vegas): the extra time is spent queuing, not travelling. When the
/// smoothed batch time is more than twice the quickest of the last
/// <see cref="QuickestWindow"/>–2×<see cref="QuickestWindow"/>, the limit goes down by one; when
/// it is within 4/3 of it, up by one. At 90 ms or 250 ms of round trip the inflation stays a few
/// percent and the limit stays at its maximum; on a saturated local database it falls to 1–2 and
/// requests gather into larger batches in the grain instead. The quickest time is forgotten
/// window by window, so a database that moved farther away is not judged against an old,
/// shorter round trip.
/// </para>
/// </remarks>
internal sealed class AdaptiveBatchLimit : IBatchLimit
{
    /// <summary>The quickest batch is remembered for one to two of these.</summary>
    internal static readonly TimeSpan QuickestWindow = TimeSpan.FromSeconds(5);

    // Inflation = 1 - quickest / smoothed. Above 1/2 the typical batch takes more than twice the
    // quickest; below 1/4 it is within 4/3 of it. In between the limit holds, so that it settles
    // instead of oscillating.
    private const double DecreaseAbove = 0.5;
    private const double IncreaseBelow = 0.25;

    // Weight of the newest batch in the smoothed time: one slow batch (a retry, a slow fsync)
    // moves it by a fifth, not all the way.
    private const double NewestWeight = 0.2;

    private readonly TimeProvider _time;
    private readonly int _max;
    private readonly long _windowTicks;
    private double _smoothedMs = double.NaN;
    private double _quickestMs = double.PositiveInfinity;
    private double _previousQuickestMs = double.PositiveInfinity;
    private long _windowStarted;

    public AdaptiveBatchLimit(int max, TimeProvider time, bool adaptive)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(max, 1);
        _max = max;
        _time = time;
        Adaptive = adaptive;
        Current = max;
        _windowStarted = time.GetTimestamp();
        _windowTicks = (long)(QuickestWindow.TotalSeconds * time.TimestampFrequency);
    }

    /// <summary>False: the limit stays at its maximum (<see cref="GrainOptions.AdaptiveBatchesInFlight"/> off).</summary>
    public bool Adaptive { get; }

    /// <summary>Batches that may be in flight now; starts at the maximum.</summary>
    public int Current { get; private set; }

    /// <summary>The hard bound: never more batches in flight than this, full or not.</summary>
    public int Max => _max;

    /// <summary>The smoothed store time of recent batches (NaN before the first).</summary>
    public double SmoothedMs => _smoothedMs;

    /// <summary>The quickest store time remembered (infinity before the first).</summary>
    public double QuickestMs => Math.Min(_quickestMs, _previousQuickestMs);

    /// <summary>The longest gather window: callers a batch answered come back within about this.</summary>
    internal static readonly TimeSpan MaxGatherWindow = TimeSpan.FromMicroseconds(200);

    /// <summary>
    /// A 64th of the quickest batch, at most <see cref="MaxGatherWindow"/>; none under 50 µs (a
    /// local database, where the limit itself gathers) or before a batch was timed.
    /// </summary>
    /// <remarks>
    /// The window has to cover the spread of a group's arrivals, not the round trip: the callers
    /// one batch answered come back within a few hundred microseconds. storm-90 over HTTP, one run
    /// each, with the window held at: 50 µs 489/s (8.4 requests per batch), 100 µs 489/s (10.0),
    /// 200 µs 493 and 486/s (11.1, 12.6), 400 µs 490/s (13.2), 1 ms 482–487/s (18–20);
    /// none at all 460/s (2.8 per batch, every slot busy).
    /// </remarks>
    public TimeSpan GatherWindow => ShareOfQuickest(64, MaxGatherWindow);

    /// <summary>The longest gather window before a batch takes one of the silo's last free store slots.</summary>
    internal static readonly TimeSpan MaxLastSlotsGatherWindow = TimeSpan.FromMilliseconds(10);

    /// <summary>
    /// A 32nd of the quickest batch, at most <see cref="MaxLastSlotsGatherWindow"/>; none under
    /// 50 µs or before a batch was timed.
    /// </summary>
    /// <remarks>
    /// Where the store slots run out (wide-250: 12 slots, 1,000 callers, 250 ms), the callers one
    /// batch answered come back over several milliseconds (HTTP, Orleans' messaging), and the first
    /// of them took the slot their batch had freed, 200 µs later, in a batch of a few; the rest
    /// waited for the next slot to come back, a 12th of a round trip. wide-250, one run each, with
    /// this window at: 200 µs (as <see cref="GatherWindow"/>) 3,154–3,290/s in 4 runs, 4 ms 3,359/s,
    /// 10 ms 3,379/s, 20 ms 3,334/s. It costs a caller at most a 32nd of a store call, and only
    /// while the slots are nearly all taken, when waiting for one would cost more.
    /// </remarks>
    public TimeSpan LastSlotsGatherWindow => ShareOfQuickest(32, MaxLastSlotsGatherWindow);

    /// <summary>The quickest batch divided by <paramref name="divisor"/>, at most <paramref name="max"/>; none under 50 µs, before a batch was timed, or when not adaptive.</summary>
    private TimeSpan ShareOfQuickest(int divisor, TimeSpan max)
    {
        if (!Adaptive || !double.IsFinite(QuickestMs))
        {
            return TimeSpan.Zero;
        }

        var window = TimeSpan.FromMilliseconds(QuickestMs / divisor);
        return window < TimeSpan.FromMicroseconds(50) ? TimeSpan.Zero : window > max ? max : window;
    }

    /// <summary>Whether one more batch may start with <paramref name="inFlight"/> already running.</summary>
    /// <param name="fullBatchWaiting">
    /// A full batch is queued: it goes while fewer than <see cref="Max"/> are in flight, because
    /// waiting cannot make it larger.
    /// </param>
    public bool MayStart(int inFlight, bool fullBatchWaiting) =>
        inFlight < Current || (fullBatchWaiting && inFlight < _max);

    /// <summary>Takes the store time of one successful batch into account.</summary>
    public void Record(TimeSpan storeTime)
    {
        var ms = storeTime.TotalMilliseconds;
        if (!Adaptive || !(ms > 0))
        {
            // A clock that did not move (a manual time provider in tests) says nothing.
            return;
        }

        var now = _time.GetTimestamp();
        var sinceWindow = now - _windowStarted;
        if (sinceWindow >= _windowTicks)
        {
            // Keep the last full window's quickest; one that ended longer ago is forgotten too.
            _previousQuickestMs = sinceWindow < 2 * _windowTicks ? _quickestMs : double.PositiveInfinity;
            _quickestMs = double.PositiveInfinity;
            _windowStarted = now;
        }

        _quickestMs = Math.Min(_quickestMs, ms);
        _smoothedMs = double.IsNaN(_smoothedMs) ? ms : (NewestWeight * ms) + ((1 - NewestWeight) * _smoothedMs);

        var inflation = 1 - (QuickestMs / _smoothedMs);
        if (inflation > DecreaseAbove && Current > 1)
        {
            Current--;
        }
        else if (inflation < IncreaseBelow && Current < _max)
        {
            Current++;
        }
    }
}
