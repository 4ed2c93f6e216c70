using Allocator.Grains.Tests.Support;
using Allocator.Telemetry;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

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
    public async Task SiloShutdown_HandsTheGrainOver_TheWaiterKeepsWaitingAndTheBatchInTheStoreIsAnsweredItsOutcome()
    {
        // Real time: a caller that finds the grain moving sends its call again at once, and after
        // a short pause if that fails too; those pauses run on the silo's clock.
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting, silos: 2, fakeTime: false);
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var host = await HostingSiloAsync(h);
        var other = 1 - host;
        var survivor = h.Cluster.Silos[other].SiloAddress.ToParsableString();
        var pool = h.GrainsOf(other).GetPoolGrain(GrainHarness.PoolId);
        var caller = h.CallerOf(other);
        var waiter = caller.AllocateAsync(GrainHarness.PoolId, new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");
        h.Store.BlockAllocations = true;
        var inStore = caller.AllocateAsync(GrainHarness.PoolId, new AllocationRequest("b"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "b's batch to reach the store");

        // A graceful stop of the silo hosting the grain: the grain answers its waiter "moved" at
        // once, the caller sends the call again, and Orleans holds it for the grain's next
        // activation, which the stopping silo starts on the survivor once the batch in the store
        // has answered (it may have committed: it is never cut off).
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[host]);
        h.Store.BlockAllocations = false;
        blocked.Release();

        // b's outcome is the one its batch decided, whether its answer came back from the
        // stopping silo or (lost with it) from the key sent again to the grain's new activation.
        (await Wait.ForAsync(inStore, "the batch in the store to be answered")).Status.Should().Be(AllocationStatus.NoCapacity);
        await Wait.ForAsync(stop, "the silo to stop");

        (await pool.GetStatusAsync()).Silo.Should().Be(survivor, "the grain moved to the surviving silo");

        // The call sent again waits in the new activation. (Orleans forwards it there from the
        // old one; when the stopped silo is then declared dead, Orleans breaks the caller's wait
        // for that forwarded call, so the caller may send it once more: the same key, parked
        // twice, served once.)
        await Wait.UntilAsync(async () => (await pool.GetStatusAsync()).Waiters >= 1, "the waiter to wait in the grain's new activation");
        waiter.IsCompleted.Should().BeFalse("a waiter is handed over, not failed");

        // Capacity freed after the move serves the waiter that was parked before it.
        (await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        var served = (await Wait.ForAsync(waiter, "the release to serve the handed-over waiter")).Allocation!;
        (await h.Store.GetAllocationAsync(GrainHarness.PoolId, served.AllocationId))!.SessionKey.Should().Be("a");
    }

    [Fact]
    public async Task SiloShutdown_QueuedAllocationsAndReleases_AreCarriedOutByTheGrainsNewActivation()
    {
        const string Pool = "handover-queued"; // unique: the outcome counter is shared with tests running in parallel
        using var outcomes = new MetricCollector<long>(AllocatorTelemetry.Meter, "allocator.allocation.outcomes");
        await using var h = await GrainHarness.CreateAsync(workers: 0, silos: 2, fakeTime: false,
            options: new GrainOptions { MaxBatchesInFlight = 1, AdaptiveBatchesInFlight = false });
        await h.Store.UpsertPoolAsync(Pool, PoolSettings.Default);
        await h.Store.Inner.RegisterWorkersAsync(Pool, [new WorkerRegistration("w0", "h:0", 10)]);
        var held = (await h.Grains.GetPoolGrain(Pool).AllocateAsync(new AllocationRequest("held"), TimeSpan.Zero)).Allocation!;
        var host = await HostingSiloAsync(h, Pool);
        var other = 1 - host;
        var caller = h.CallerOf(other);
        var survivor = h.Cluster.Silos[other];
        var survivorGrains = h.GrainsOf(other);

        // One batch of each kind in the store and, behind them (one batch of each in flight at
        // most), two allocations and a release queued in the grain.
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var first = caller.AllocateAsync(Pool, new AllocationRequest("first"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch to reach the store");
        var release = caller.ReleaseAsync(Pool, held.AllocationId, held.Epoch);
        var blockedRelease = await Wait.ForAsync(h.Store.BlockedRelease(0), "a release batch to reach the store");
        var queuedRelease = caller.ReleaseAsync(Pool, held.AllocationId, held.Epoch);
        var queued = new[] { "q1", "q2" }.Select(key => caller.AllocateAsync(Pool, new AllocationRequest(key), TimeSpan.Zero)).ToList();
        await Wait.UntilAsync(async () => (await survivorGrains.GetPoolGrain(Pool).GetStatusAsync()) is { QueuedAllocations: 2, QueuedReleases: 1 }, "two allocations and a release to queue in the grain");

        // The stop hands the grain over: the queued calls hear "moved" (nothing was done), and
        // their callers send them again, to wait for the grain's next activation.
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[host]);
        await Wait.UntilAsync(() => Moved(outcomes, Pool) == 2, "the queued allocations to be answered \"moved\"");
        stop.IsCompleted.Should().BeFalse("the silo waits for its batches in the store");
        h.Store.BlockAllocations = false;
        h.Store.BlockReleases = false;
        blocked.Release();
        blockedRelease.Release();
        await Wait.ForAsync(stop, "the silo to stop");

        // Every caller hears the outcome of its own request, carried out once: the batches in the
        // store by the old activation, the queued calls (sent again) by the new one.
        var allocations = await Wait.ForAsync(Task.WhenAll(queued.Prepend(first)), "every allocation to be answered");
        allocations.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        foreach (var (outcome, key) in allocations.Zip(["first", "q1", "q2"]))
        {
            (await h.Store.GetAllocationAsync(Pool, outcome.Allocation!.AllocationId))!.SessionKey.Should().Be(key);
        }

        (await Wait.ForAsync(release, "the release in the store")).Status.Should().Be(LeaseStatus.Ok);
        (await Wait.ForAsync(queuedRelease, "the queued release, carried out after the move")).Status.Should().Be(LeaseStatus.NotActive, "the first release ended the allocation");
        h.Store.AllocateRequests.Select(r => r.SessionKey).Should().BeEquivalentTo(["held", "first", "q1", "q2"], "each request reached the store once");
        (await survivorGrains.GetPoolGrain(Pool).GetStatusAsync()).Silo.Should().Be(survivor.SiloAddress.ToParsableString());
    }

    [Fact]
    public async Task SiloShutdown_OfTheOnlySilo_FailsWaitersAtOnce_NothingWasDone()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        // No other silo can take the grain (the fake clock never moves, so no deadline can be
        // what answers the waiter).
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[0]);

        var waiting = () => Wait.ForAsync(waiter, "the parked caller to be failed");
        var error = (await waiting.Should().ThrowAsync<AllocatorException>()).Which;
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.Message.Should().Contain("nothing was done");
        await Wait.ForAsync(stop, "the silo to stop");
    }

    private static long Moved(MetricCollector<long> outcomes, string pool) =>
        outcomes.GetMeasurementSnapshot().Where(m => Equals(m.Tags[AllocatorTelemetry.Tags.Pool], pool) && Equals(m.Tags[AllocatorTelemetry.Tags.Outcome], "moved")).Sum(m => m.Value);

    private static async Task<int> HostingSiloAsync(GrainHarness h, string pool = GrainHarness.PoolId)
    {
        var silo = (await h.Grains.GetPoolGrain(pool).GetStatusAsync()).Silo;
        var index = h.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == silo);
        index.Should().BeGreaterThanOrEqualTo(0, $"the grain reports silo {silo}; the cluster has {string.Join(", ", h.Cluster.Silos.Select(s => s.SiloAddress.ToParsableString()))}");
        return index;
    }
}
