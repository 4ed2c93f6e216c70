using System.Collections.Concurrent;
using System.Diagnostics.Metrics;
using Allocator.InMemory;
using Allocator.Telemetry;

namespace Allocator.Grains.Tests;

public sealed class MetricsTests
{
    private const string PoolId = "metrics-pool"; // unique to this test: other tests run in parallel

    [Fact]
    public async Task Allocate_RecordsOutcomesLatencyAndBatchSizes()
    {
        var measurements = new ConcurrentBag<(string Instrument, double Value, string? Outcome)>();
        using var listener = new MeterListener
        {
            InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == AllocatorTelemetry.Name)
                {
                    l.EnableMeasurementEvents(instrument);
                }
            },
        };
        void Record(Instrument instrument, double value, ReadOnlySpan<KeyValuePair<string, object?>> tags)
        {
            string? pool = null, outcome = null;
            foreach (var tag in tags)
            {
                pool = tag.Key == AllocatorTelemetry.Tags.Pool ? tag.Value as string : pool;
                outcome = tag.Key == AllocatorTelemetry.Tags.Outcome ? tag.Value as string : outcome;
            }

            if (pool == PoolId)
            {
                measurements.Add((instrument.Name, value, outcome));
            }
        }

        listener.SetMeasurementEventCallback<long>((i, v, t, _) => Record(i, v, t));
        listener.SetMeasurementEventCallback<int>((i, v, t, _) => Record(i, v, t));
        listener.SetMeasurementEventCallback<double>((i, v, t, _) => Record(i, v, t));
        listener.Start();

        var store = new InMemoryWorkerStore();
        await store.UpsertPoolAsync(PoolId, PoolSettings.Default);
        await store.RegisterWorkersAsync(PoolId, [new WorkerRegistration("w0", "h:0", 1)]);
        await using var grains = new GrainFactory(store);
        var pool = grains.GetPoolGrain(PoolId);

        (await pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
        (await pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);

        measurements.Where(m => m.Instrument == "allocator.allocation.outcomes").Select(m => m.Outcome).Should().BeEquivalentTo(["allocated", "no_capacity"]);
        measurements.Where(m => m.Instrument == "allocator.allocation.duration").Should().HaveCount(2);
        measurements.Where(m => m.Instrument == "allocator.batch.size").Select(m => m.Value).Should().Equal(1, 1);
    }
}
