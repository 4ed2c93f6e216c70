namespace Allocator.Grains;

/// <summary>
/// What a pool grain saw of its pool's demand over the last <see cref="Window"/> (issue 49): the
/// requests that arrived, those answered "no capacity" (at once, or when their wait ran out) and
/// the most callers parked at once. One bucket per second in a ring, so a read costs the window's
/// length in seconds and a count costs one addition.
/// </summary>
/// <remarks>Single-threaded by contract: the grain's turns only.</remarks>
internal sealed class DemandWindow
{
    private readonly TimeProvider _time;
    private readonly Bucket[] _buckets;

    public DemandWindow(TimeProvider time, TimeSpan window)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(window, TimeSpan.FromSeconds(1));
        _time = time;
        Window = TimeSpan.FromSeconds(Math.Ceiling(window.TotalSeconds));
        _buckets = new Bucket[(int)Window.TotalSeconds];
    }

    /// <summary>How far back the counts reach (whole seconds).</summary>
    public TimeSpan Window { get; }

    /// <summary>A request for <paramref name="units"/> reached the grain.</summary>
    public void Arrived(int units)
    {
        ref var bucket = ref Current();
        bucket.Arrivals++;
        bucket.ArrivedUnits += units;
    }

    /// <summary>A caller was answered "no capacity" for <paramref name="units"/>.</summary>
    public void Refused(int units)
    {
        ref var bucket = ref Current();
        bucket.Refusals++;
        bucket.RefusedUnits += units;
    }

    /// <summary><paramref name="waiters"/> callers are parked now.</summary>
    public void Waiting(int waiters)
    {
        ref var bucket = ref Current();
        bucket.PeakWaiters = Math.Max(bucket.PeakWaiters, waiters);
    }

    /// <summary>The counts over the window, with the callers parked now.</summary>
    public PoolDemandCounts Read(int waitersNow)
    {
        Waiting(waitersNow);
        var second = Second();
        long arrivals = 0, arrivedUnits = 0, refusals = 0, refusedUnits = 0;
        var peak = 0;
        foreach (var bucket in _buckets)
        {
            if (second - bucket.Second < _buckets.Length)
            {
                arrivals += bucket.Arrivals;
                arrivedUnits += bucket.ArrivedUnits;
                refusals += bucket.Refusals;
                refusedUnits += bucket.RefusedUnits;
                peak = Math.Max(peak, bucket.PeakWaiters);
            }
        }

        return new PoolDemandCounts(Window, arrivals, arrivedUnits, refusals, refusedUnits, peak, waitersNow);
    }

    private long Second() => _time.GetUtcNow().ToUnixTimeSeconds();

    /// <summary>This second's bucket, emptied first if it last held an older second.</summary>
    private ref Bucket Current()
    {
        var second = Second();
        ref var bucket = ref _buckets[(int)(second % _buckets.Length)];
        if (bucket.Second != second)
        {
            bucket = new Bucket { Second = second };
        }

        return ref bucket;
    }

    private struct Bucket
    {
        public long Second;
        public long Arrivals;
        public long ArrivedUnits;
        public long Refusals;
        public long RefusedUnits;
        public int PeakWaiters;
    }
}
