using Allocator.Grains.Tests.Support;
using Allocator.Telemetry;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

namespace Allocator.Grains.Tests;

public sealed class MetricsTests
{
    private const string PoolId = "metrics-pool"; // unique to this test: other tests run in parallel

    [Fact]
    public async Task Allocate_RecordsOutcomesLatencyAndBatchSizes()
    {
        using var outcomes = new MetricCollector<long>(AllocatorTelemetry.Meter, "allocator.allocation.outcomes");
        using var durations = new MetricCollector<double>(AllocatorTelemetry.Meter, "allocator.allocation.duration");
        using var batchSizes = new MetricCollector<int>(AllocatorTelemetry.Meter, "allocator.batch.size");
        await using var h = await GrainHarness.CreateAsync(workers: 0);
        await h.Store.UpsertPoolAsync(PoolId, PoolSettings.Default);
        await h.Store.RegisterWorkersAsync(PoolId, [new WorkerRegistration("w0", "h:0", 1)]);
        var pool = h.Grains.GetPoolGrain(PoolId);

        (await pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
        (await pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);

        Of(outcomes.GetMeasurementSnapshot()).Select(m => m.Tags[AllocatorTelemetry.Tags.Outcome]).Should().BeEquivalentTo(["allocated", "no_capacity"]);
        Of(durations.GetMeasurementSnapshot()).Should().HaveCount(2);
        Of(batchSizes.GetMeasurementSnapshot()).Select(m => m.Value).Should().Equal(1, 1);
    }

    private static IEnumerable<CollectedMeasurement<T>> Of<T>(IReadOnlyList<CollectedMeasurement<T>> measurements)
        where T : struct =>
        measurements.Where(m => m.Tags.TryGetValue(AllocatorTelemetry.Tags.Pool, out var pool) && Equals(pool, PoolId));
}
