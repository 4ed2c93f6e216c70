using System.Diagnostics;
using System.Diagnostics.Metrics;
using Allocator.Client;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

namespace Allocator.Host.Tests;

/// <summary>Utilization, load and capacity per pool as observable gauges, read with <c>MetricCollector</c>.</summary>
public sealed class PoolGaugesTests
{
    [Fact]
    public async Task PoolStatisticsRead_ReachTheGauges_AndAPoolOnlyAllocatedOnIsRefreshedWhenCollected()
    {
        await using var host = await TestHost.StartAsync();
        var meters = host.Services.GetRequiredService<IMeterFactory>();
        using var utilization = new MetricCollector<double>(meters, "Allocator", "allocator.pool.utilization");
        using var capacity = new MetricCollector<double>(meters, "Allocator", "allocator.pool.capacity");

        // Read through the API: the statistics the host read are what the gauge reports.
        var read = Unique.Name("gauge-read");
        await host.Admin.PutPoolAsync(read, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(read, "w1", new Client.WorkerRegistration("a:1", 4));
        (await host.Broker.AllocateAsync(read, new AllocateRequest(), "g-1")).Status.Should().Be(AllocateStatus.Allocated);
        await host.Broker.GetPoolAsync(read);
        utilization.RecordObservableInstruments();
        utilization.GetMeasurementSnapshot().Should().ContainSingle(m => Equals(m.Tags["allocator.pool"], read)).Which.Value.Should().Be(0.25);

        // Only allocated on: the first collection starts a refresh in the background; a later one reports it.
        var allocated = Unique.Name("gauge-alloc");
        await host.Admin.PutPoolAsync(allocated, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(allocated, "w1", new Client.WorkerRegistration("a:1", 2));
        (await host.Broker.AllocateAsync(allocated, new AllocateRequest { Units = 2 }, "g-2")).Status.Should().Be(AllocateStatus.Allocated);
        var waited = Stopwatch.StartNew();
        while (!utilization.GetMeasurementSnapshot().Any(m => Equals(m.Tags["allocator.pool"], allocated)))
        {
            waited.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(10), "a collection should refresh the pool's statistics within 10 s");
            await Task.Delay(50);
            utilization.RecordObservableInstruments();
        }

        utilization.GetMeasurementSnapshot().Last(m => Equals(m.Tags["allocator.pool"], allocated)).Value.Should().Be(1.0);
        capacity.RecordObservableInstruments();
        capacity.GetMeasurementSnapshot().Last(m => Equals(m.Tags["allocator.pool"], allocated)).Value.Should().Be(2);
        utilization.Instrument!.Unit.Should().Be("1");
    }
}
