using System.Diagnostics.Metrics;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Counts the store allocation batches the pool grains make, from the <c>allocator.batch.size</c>
/// histogram they record on the <c>Allocator</c> meter (one measurement per batch, its value the
/// requests in it). Counts from <see cref="MarkMeasuredStart"/> on, so warm-up batches are left out
/// (a batch in flight across that instant counts as measured).
/// </summary>
internal sealed class BatchCounter : IDisposable
{
    public const string MeterName = "Allocator";
    public const string InstrumentName = "allocator.batch.size";
    public const string DurationInstrumentName = "allocator.batch.duration";

    private readonly MeterListener _listener = new();
    private long _batches;
    private long _requests;
    private long _startBatches = -1;
    private long _startRequests;
    private readonly System.Collections.Concurrent.ConcurrentQueue<double> _durations = new();

    public BatchCounter()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == MeterName && instrument.Name is InstrumentName or DurationInstrumentName)
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<int>((_, value, _, _) =>
        {
            Interlocked.Increment(ref _batches);
            Interlocked.Add(ref _requests, value);
        });
        _listener.SetMeasurementEventCallback<double>((_, value, _, _) =>
        {
            if (Interlocked.Read(ref _startBatches) >= 0)
            {
                _durations.Enqueue(value * 1000); // recorded in seconds (semantic conventions), reported in ms
            }
        });
        _listener.Start();
    }

    /// <summary>Store batches since the measured phase began.</summary>
    public long Batches => Interlocked.Read(ref _batches) - Math.Max(0, Interlocked.Read(ref _startBatches));

    /// <summary>Requests in those batches.</summary>
    public long Requests => Interlocked.Read(ref _requests) - Interlocked.Read(ref _startRequests);

    /// <summary>Store call time of each measured batch (round trip, statement, commit), in ms, sorted.</summary>
    public double[] SortedDurations()
    {
        var all = _durations.ToArray();
        Array.Sort(all);
        return all;
    }

    /// <summary>Takes the counts so far as the warm-up's; only the first call counts.</summary>
    public void MarkMeasuredStart()
    {
        if (Interlocked.Read(ref _startBatches) >= 0)
        {
            return;
        }

        lock (_listener)
        {
            if (_startBatches >= 0)
            {
                return;
            }

            _startRequests = Interlocked.Read(ref _requests);
            Interlocked.Exchange(ref _startBatches, Interlocked.Read(ref _batches));
        }
    }

    public void Dispose() => _listener.Dispose();
}
