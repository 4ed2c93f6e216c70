using System.Diagnostics;
using System.Diagnostics.Metrics;
using Allocator.Client;
using Microsoft.Extensions.DependencyInjection;
using Allocator.Host.Telemetry;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Host.Tests;

/// <summary>Utilization, load and capacity per pool as observable gauges, read with <c>MetricCollector</c>.</summary>
public sealed class PoolGaugesTests
{
    [Fact]
    public async Task Refresh_ReadsOnlyStalePools_AndForgetsPoolsNotSeenFor10Minutes()
    {
        var time = new FakeTimeProvider(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero));
        var store = new StoreFaultTests.FaultyStore(new InMemoryWorkerStore(time));
        await store.UpsertPoolAsync("p", Allocator.PoolSettings.Default);
        await store.RegisterWorkersAsync("p", [new Allocator.WorkerRegistration("w1", "a:1", 4)]);
        var services = new ServiceCollection().AddMetrics().AddSingleton<IWorkerStore>(store).BuildServiceProvider();
        await using var _ = services;
        var gauges = new PoolGauges(services.GetRequiredService<IMeterFactory>(), services, time, NullLogger<PoolGauges>.Instance);
        using var capacity = new MetricCollector<double>(services.GetRequiredService<IMeterFactory>(), "Allocator", "allocator.pool.capacity");

        gauges.Seen("p");
        await gauges.RefreshAsync(CancellationToken.None);
        store.StatisticsReads.Should().Be(1, "a pool seen but never read is read");

        time.Advance(PoolGauges.RefreshAfter - TimeSpan.FromSeconds(1));
        await gauges.RefreshAsync(CancellationToken.None);
        store.StatisticsReads.Should().Be(1, "statistics younger than RefreshAfter are not read again");

        time.Advance(TimeSpan.FromSeconds(2));
        await gauges.RefreshAsync(CancellationToken.None);
        store.StatisticsReads.Should().Be(2);

        time.Advance(PoolGauges.ForgetAfter);
        await gauges.RefreshAsync(CancellationToken.None);
        store.StatisticsReads.Should().Be(2, "a pool not served for ForgetAfter is dropped, not read");
        capacity.RecordObservableInstruments();
        capacity.GetMeasurementSnapshot().Should().BeEmpty();
    }

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
            // The defect is a refresh that never comes; the limit is only how long to wait for it.
            waited.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(30), "a collection should start a refresh of the pool's statistics that a later one reports");
            await Task.Delay(50);
            utilization.RecordObservableInstruments();
        }

        utilization.GetMeasurementSnapshot().Last(m => Equals(m.Tags["allocator.pool"], allocated)).Value.Should().Be(1.0);
        capacity.RecordObservableInstruments();
        capacity.GetMeasurementSnapshot().Last(m => Equals(m.Tags["allocator.pool"], allocated)).Value.Should().Be(2);
        utilization.Instrument!.Unit.Should().Be("1");
    }
}
