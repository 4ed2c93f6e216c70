using Allocator.Grains.Tests.Support;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests;

public sealed class DemandWindowTests
{
    [Fact]
    public void Read_CountsWhatHappenedWithinTheWindow_AndForgetsWhatIsOlder()
    {
        var time = new FakeTimeProvider(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero));
        var window = new DemandWindow(time, TimeSpan.FromSeconds(10));
        window.Arrived(2);
        window.Refused(2);
        window.Waiting(5);

        time.Advance(TimeSpan.FromSeconds(4));
        window.Arrived(1);
        window.Arrived(1);
        window.Waiting(3);
        window.Read(waitersNow: 1).Should().Be(new PoolDemandCounts(TimeSpan.FromSeconds(10), Arrivals: 3, ArrivedUnits: 4, Refusals: 1, RefusedUnits: 2, PeakWaiters: 5, WaitersNow: 1));

        // Ten seconds after the first second: it has left the window, the second one has not.
        time.Advance(TimeSpan.FromSeconds(6));
        window.Read(waitersNow: 0).Should().Be(new PoolDemandCounts(TimeSpan.FromSeconds(10), 2, 2, 0, 0, 3, 0));

        time.Advance(TimeSpan.FromSeconds(10));
        window.Read(waitersNow: 0).Should().Be(new PoolDemandCounts(TimeSpan.FromSeconds(10), 0, 0, 0, 0, 0, 0), "a quiet window counts nothing");
    }

    [Fact]
    public void Read_ABucketReusedAfterAFullTurn_StartsEmpty()
    {
        var time = new FakeTimeProvider(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero));
        var window = new DemandWindow(time, TimeSpan.FromSeconds(3));
        window.Arrived(7);
        time.Advance(TimeSpan.FromSeconds(3)); // the same slot of the ring, three seconds on
        window.Arrived(1);

        window.Read(0).ArrivedUnits.Should().Be(1);
    }

    [Fact]
    public async Task PoolGrain_CountsArrivalsNoCapacityAnswersAndParkedCallers_InItsStatus()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 2, settings: new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) }, options: new GrainOptions { DemandWindow = TimeSpan.FromSeconds(30) });

        (await h.Pool.AllocateAsync(new AllocationRequest("a", 2), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
        (await h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);
        var parked = h.Pool.AllocateAsync(new AllocationRequest("c"), TimeSpan.FromSeconds(10));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "c to be parked in the grain");

        var demand = (await h.Pool.GetStatusAsync()).Demand;
        demand.Should().Be(new PoolDemandCounts(TimeSpan.FromSeconds(30), Arrivals: 3, ArrivedUnits: 4, Refusals: 1, RefusedUnits: 1, PeakWaiters: 1, WaitersNow: 1));

        h.Time.Advance(TimeSpan.FromSeconds(11));
        (await Wait.ForAsync(parked, "c's wait to run out")).Status.Should().Be(AllocationStatus.NoCapacity);
        (await h.Pool.GetStatusAsync()).Demand!.Refusals.Should().Be(2, "a wait that ran out is a no-capacity answer too");
    }
}
