using System.Diagnostics.Metrics;
using Allocator.Client;
using Allocator.Grains;
using Allocator.Host.Demand;
using Allocator.Host.Options;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

namespace Allocator.Host.Tests;

/// <summary>
/// A pool's demand (issue 49): the formula of docs/placement.md, "Demand", on hand-made counts,
/// then through the service: a pool with a caller waiting answers its demand and the workers wanted.
/// </summary>
public sealed class DemandTests
{
    private static readonly TimeSpan Minute = TimeSpan.FromSeconds(60);

    [Fact]
    public void Estimate_CountsLoadWaitersAndRefusals_AddsTheBuffer_AndDividesByTheMeanWorker()
    {
        // 10 workers of 8 slots, 40 in use; 3 waiting at most (2 now) and 6 units refused in the
        // window; 120 requests of 1 unit in 60 s (2/s). Demand 49 slots; buffer 20% = 9.8 -> 10;
        // 59 / 8 -> 8.
        var statistics = Statistics(workers: 10, capacity: 80, load: 40);
        var counts = new PoolDemandCounts(Minute, Arrivals: 120, ArrivedUnits: 120, Refusals: 6, RefusedUnits: 6, PeakWaiters: 3, WaitersNow: 2);

        var estimate = DemandEstimate.From(statistics, counts, new AllocatorDemandOptions())!;

        estimate.Should().Be(new DemandEstimate(60, 2, 2, 6, 2, 3, DemandSlots: 49, BufferSlots: 10, SlotsPerWorker: 8, WorkersWanted: 8));
    }

    [Fact]
    public void Estimate_Headroom_KeepsRoomForTheArrivalsOfAWorkersStartUp_AndTheMinimumHolds()
    {
        var statistics = Statistics(workers: 4, capacity: 40, load: 0);
        var quiet = new PoolDemandCounts(Minute, 0, 0, 0, 0, 0, 0);
        DemandEstimate.From(statistics, quiet, new AllocatorDemandOptions())!.WorkersWanted.Should().Be(0, "no demand, no buffer, no minimum");
        DemandEstimate.From(statistics, quiet, new AllocatorDemandOptions { MinimumWorkers = 2 })!.WorkersWanted.Should().Be(2);

        // 3 units a second, a worker takes 30 s to start: 90 slots of headroom, 10 per worker.
        var busy = new PoolDemandCounts(Minute, Arrivals: 90, ArrivedUnits: 180, Refusals: 0, RefusedUnits: 0, PeakWaiters: 0, WaitersNow: 0);
        var estimate = DemandEstimate.From(statistics, busy, new AllocatorDemandOptions { BufferFraction = 0, HeadroomSeconds = 30 })!;
        estimate.BufferSlots.Should().Be(90);
        estimate.WorkersWanted.Should().Be(9);
    }

    [Fact]
    public void Estimate_WaitersAskForTheMeanUnitsOfARequest_AndAPoolWithoutWorkersCountsOneSlotEach()
    {
        // Requests asked for 2 units on average: 3 waiters stand for 6 slots.
        var counts = new PoolDemandCounts(Minute, Arrivals: 10, ArrivedUnits: 20, Refusals: 0, RefusedUnits: 0, PeakWaiters: 3, WaitersNow: 3);
        DemandEstimate.From(Statistics(workers: 0, capacity: 0, load: 0), counts, new AllocatorDemandOptions { BufferFraction = 0 })!
            .Should().Match<DemandEstimate>(e => e.DemandSlots == 6 && e.SlotsPerWorker == 1 && e.WorkersWanted == 6);
    }

    [Fact]
    public void Estimate_FromAGrainThatCountsNothing_IsNone()
    {
        // A grain of a release before 1.1.0 answers its status without demand counts.
        DemandEstimate.From(Statistics(workers: 1, capacity: 1, load: 0), null, new AllocatorDemandOptions()).Should().BeNull();
    }

    [Theory]
    [InlineData("Allocator:Demand:BufferFraction", "-0.1")]
    [InlineData("Allocator:Demand:HeadroomSeconds", "3601")]
    [InlineData("Allocator:Demand:MinimumWorkers", "-1")]
    public async Task InvalidDemandOptions_FailStart_NamingTheOption(string key, string value)
    {
        var start = async () => await TestHost.StartAsync([$"--{key}={value}"]);

        (await start.Should().ThrowAsync<Microsoft.Extensions.Options.OptionsValidationException>()).Which.Message.Should().Contain(key);
    }

    [Fact]
    public async Task GetPool_WithACallerWaiting_AnswersTheDemand_AndTheGaugeReportsTheWorkersWanted()
    {
        await using var host = await TestHost.StartAsync();
        using var wanted = new MetricCollector<long>(host.Services.GetRequiredService<IMeterFactory>(), "Allocator", "allocator.pool.workers_wanted");
        var pool = Unique.Name("demand");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings { MaxWaitMs = 20_000 });
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 2));
        (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "d-1")).Status.Should().Be(AllocateStatus.Allocated);
        (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "d-2")).Status.Should().Be(AllocateStatus.Allocated);
        (await host.Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 0 }, "d-3")).Status.Should().Be(AllocateStatus.NoCapacity);
        var waiting = host.Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 20_000 }, "d-4");
        await MultiInstanceTests.UntilAsync(async () => (await host.Broker.GetPoolAsync(pool)).Waiters == 1, TimeSpan.FromSeconds(15), "d-4 to wait in the pool's grain");

        var demand = (await host.Broker.GetPoolAsync(pool)).Demand ?? throw new InvalidOperationException("GET answered no demand");

        // 2 in use + 1 waiting + 1 refused = 4 slots; 20% more is 0.8 -> 1; 5 slots of 2 per worker -> 3.
        demand.Should().Match<PoolDemand>(d => d.Waiters == 1 && d.NoCapacityAnswers == 1 && d.DemandSlots == 4 && d.BufferSlots == 1 && d.SlotsPerWorker == 2 && d.WorkersWanted == 3);
        demand.WindowSeconds.Should().Be(60);
        demand.ArrivalsPerSecond.Should().BeApproximately(4 / 60.0, 0.001);
        wanted.RecordObservableInstruments();
        wanted.GetMeasurementSnapshot().Should().Contain(m => m.Value == 3 && Equals(m.Tags["allocator.pool"], pool), "the GET's estimate reaches the gauge");

        await host.Admin.RegisterWorkerAsync(pool, "w2", new Client.WorkerRegistration("a:2", 2));
        (await waiting).Status.Should().Be(AllocateStatus.Allocated, "a new worker serves the waiting caller");
    }

    private static PoolStatistics Statistics(int workers, long capacity, long load) => new()
    {
        PoolId = "p",
        Settings = Allocator.PoolSettings.Default,
        Workers = workers,
        AvailableWorkers = workers,
        Capacity = capacity,
        Load = load,
        FreeSlots = capacity - load,
        ActiveAllocations = load,
        MinLoad = 0,
        MaxLoad = 0,
        MinScore = 0,
        MaxScore = 0,
    };
}
