using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

public sealed class ShutdownAndIdleTests
{
    private static readonly PoolSettings Waiting = new() { MaxWait = TimeSpan.FromMinutes(1) };

    [Fact]
    public async Task IdlePoolGrain_IsCollectedByOrleansAndReactivatedOnTheNextCall()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { IdleTimeout = TimeSpan.FromSeconds(10) });
        await h.Pool.AllocateAsync(new AllocationRequest("s1"), TimeSpan.Zero);
        h.Store.Subscriptions.Should().Be(1, "the active grain subscribes to the store's changes");

        // Orleans' activation collector runs on the silo's clock: idle collection is the
        // GrainOptions.IdleTimeout the grains were given, as Orleans' CollectionAge.
        for (var i = 0; i < 5; i++)
        {
            h.Time.Advance(TimeSpan.FromSeconds(1));
        }

        h.Store.Subscriptions.Should().Be(1, "idle for 5 s of 10");
        await Wait.UntilAsync(
            () =>
            {
                h.Time.Advance(TimeSpan.FromSeconds(1));
                return h.Store.Subscriptions == 0;
            },
            "the idle grain to be collected (and unsubscribe)");

        (await h.Pool.AllocateAsync(new AllocationRequest("s2"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
        h.Store.Subscriptions.Should().Be(1);
    }

    [Fact]
    public async Task PoolGrainWithAWaiter_IsNotCollected()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting, options: new GrainOptions { IdleTimeout = TimeSpan.FromSeconds(10) });
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(50));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        for (var i = 0; i < 30; i++)
        {
            h.Time.Advance(TimeSpan.FromSeconds(1));
            await Task.Delay(10);
        }

        h.Store.Subscriptions.Should().Be(1, "a parked caller is a request in flight: the grain is not idle");
        waiter.IsCompleted.Should().BeFalse();
        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);
        (await Wait.ForAsync(waiter, "the release to serve the waiter")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task SiloShutdown_FailsWaitersAtOnceAndFinishesBatchesInTheStore()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting, silos: 2);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);
        var host = await HostingSiloAsync(h);
        var other = 1 - host;
        var survivor = h.Cluster.Silos[other].SiloAddress.ToParsableString();
        var pool = h.GrainsOf(other).GetPoolGrain(GrainHarness.PoolId);
        var waiter = pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");
        h.Store.BlockAllocations = true;
        var inStore = pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "b's batch to reach the store");

        // A graceful stop of the silo hosting the grain (the fake clock never moves, so no
        // deadline can be what answers the waiter).
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[host]);

        var waiting = () => Wait.ForAsync(waiter, "the parked caller to be failed");
        var error = (await waiting.Should().ThrowAsync<AllocatorException>()).Which;
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.Message.Should().Contain("nothing was done");

        // The batch in the store may commit: the grain waits for it and answers its caller.
        blocked.Release();
        (await Wait.ForAsync(inStore, "the batch in the store to be answered")).Status.Should().Be(AllocationStatus.NoCapacity);
        await Wait.ForAsync(stop, "the silo to stop");

        // The pool lives on: the next call activates its grain on the surviving silo.
        h.Store.BlockAllocations = false;
        (await pool.AllocateAsync(new AllocationRequest("c"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);
        (await pool.GetStatusAsync()).Silo.Should().Be(survivor);
    }

    private static async Task<int> HostingSiloAsync(GrainHarness h)
    {
        var silo = (await h.Pool.GetStatusAsync()).Silo;
        var index = h.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == silo);
        index.Should().BeGreaterThanOrEqualTo(0, $"the grain reports silo {silo}; the cluster has {string.Join(", ", h.Cluster.Silos.Select(s => s.SiloAddress.ToParsableString()))}");
        return index;
    }
}
