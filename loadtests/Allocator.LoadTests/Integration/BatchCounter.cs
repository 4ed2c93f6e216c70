using System.Collections.Concurrent;
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
    public const string GrainTimeInstrumentName = "allocator.allocation.duration";
    public const string QueueWaitInstrumentName = "allocator.allocation.queue_wait";
    public const string SlotWaitInstrumentName = "allocator.store.slot_wait";

    // The HTTP path around the grain (semantic conventions; recorded by ASP.NET Core and by
    // HttpClient in this process): server time minus grain time is the endpoint and Orleans'
    // messaging, client time minus server time is the sockets and the client's own work.
    public const string ServerMeterName = "Microsoft.AspNetCore.Hosting";
    public const string ServerDurationInstrumentName = "http.server.request.duration";
    public const string ClientMeterName = "System.Net.Http";
    public const string ClientDurationInstrumentName = "http.client.request.duration";

    private readonly MeterListener _listener = new();
    private long _batches;
    private long _requests;
    private long _singles;
    private long _startBatches = -1;
    private long _startRequests;
    private long _startSingles;
    private readonly ConcurrentQueue<double> _durations = new();
    private readonly ConcurrentQueue<double> _grainTimes = new();
    private readonly ConcurrentQueue<double> _queueWaits = new();
    private readonly ConcurrentQueue<double> _slotWaits = new();
    private readonly ConcurrentQueue<double> _serverTimes = new();
    private readonly ConcurrentQueue<double> _clientTimes = new();

    public BatchCounter()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if ((instrument.Meter.Name == MeterName && instrument.Name is InstrumentName or DurationInstrumentName or GrainTimeInstrumentName or QueueWaitInstrumentName or SlotWaitInstrumentName)
                || (instrument.Meter.Name == ServerMeterName && instrument.Name == ServerDurationInstrumentName)
                || (instrument.Meter.Name == ClientMeterName && instrument.Name == ClientDurationInstrumentName))
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<int>((_, value, _, _) =>
        {
            Interlocked.Increment(ref _batches);
            Interlocked.Add(ref _requests, value);
            if (value == 1)
            {
                Interlocked.Increment(ref _singles);
            }
        });
        _listener.SetMeasurementEventCallback<double>((instrument, value, _, _) =>
        {
            if (Interlocked.Read(ref _startBatches) < 0)
            {
                return;
            }

            var queue = instrument.Name switch
            {
                DurationInstrumentName => _durations,
                GrainTimeInstrumentName => _grainTimes,
                SlotWaitInstrumentName => _slotWaits,
                ServerDurationInstrumentName => _serverTimes,
                ClientDurationInstrumentName => _clientTimes,
                _ => _queueWaits,
            };
            queue.Enqueue(value * 1000); // recorded in seconds (semantic conventions), reported in ms
        });
        _listener.Start();
    }

    /// <summary>Store batches since the measured phase began.</summary>
    public long Batches => Interlocked.Read(ref _batches) - Math.Max(0, Interlocked.Read(ref _startBatches));

    /// <summary>Requests in those batches.</summary>
    public long Requests => Interlocked.Read(ref _requests) - Interlocked.Read(ref _startRequests);

    /// <summary>
    /// Those batches that carried a single request: each pays a whole statement and commit for one
    /// allocation, so their share says how well the grain gathers (issue 24: about half at loopback).
    /// </summary>
    public long Singles => Interlocked.Read(ref _singles) - Interlocked.Read(ref _startSingles);

    /// <summary>Store call time of each measured batch (round trip, statement, commit), in ms, sorted.</summary>
    public double[] SortedDurations() => Sorted(_durations);

    /// <summary>Per measured allocation, from its call reaching the pool grain to its answer, in ms, sorted.</summary>
    public double[] SortedGrainTimes() => Sorted(_grainTimes);

    /// <summary>Per measured allocation, its wait in the grain before its store batch started, in ms, sorted.</summary>
    public double[] SortedQueueWaits() => Sorted(_queueWaits);

    /// <summary>
    /// Each measured wait of a store batch in line for one of the silo's store slots, in ms,
    /// sorted (batches that found a slot free are not in it).
    /// </summary>
    public double[] SortedSlotWaits() => Sorted(_slotWaits);

    /// <summary>Per measured HTTP request, as the service's Kestrel timed it, in ms, sorted (empty without HTTP).</summary>
    public double[] SortedServerTimes() => Sorted(_serverTimes);

    /// <summary>Per measured HTTP request, as the load generator's HttpClient timed it, in ms, sorted (empty without HTTP).</summary>
    public double[] SortedClientTimes() => Sorted(_clientTimes);

    private static double[] Sorted(ConcurrentQueue<double> values)
    {
        var all = values.ToArray();
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
            _startSingles = Interlocked.Read(ref _singles);
            Interlocked.Exchange(ref _startBatches, Interlocked.Read(ref _batches));
        }
    }

    public void Dispose() => _listener.Dispose();
}
