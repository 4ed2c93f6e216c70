using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

public sealed class ShutdownAndIdleTests
{
    private static readonly PoolSettings Waiting = new() { MaxWait = TimeSpan.FromMinutes(1) };

    [Fact]
    public async Task IdlePoolGrain_IsDeactivatedAndReactivatedOnTheNextCall()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { IdleTimeout = TimeSpan.FromSeconds(10) });
        await h.Pool.AllocateAsync(new AllocationRequest("s1"), TimeSpan.Zero);
        h.Grains.ActivationCount.Should().Be(1);
        h.Store.Subscriptions.Should().Be(1);

        h.Time.Advance(TimeSpan.FromSeconds(5));
        h.Grains.ActivationCount.Should().Be(1, "idle for 5 s of 10");
        h.Time.Advance(TimeSpan.FromSeconds(5));

        await Wait.UntilAsync(() => h.Grains.ActivationCount == 0 && h.Store.Subscriptions == 0, "the idle grain to deactivate and unsubscribe");
        (await h.Pool.AllocateAsync(new AllocationRequest("s2"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
        h.Grains.ActivationCount.Should().Be(1);
        h.Store.Subscriptions.Should().Be(1);
    }

    [Fact]
    public async Task PoolGrainWithAWaiter_IsNotIdle()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting, options: new GrainOptions { IdleTimeout = TimeSpan.FromSeconds(10) });
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(50));
        await Wait.UntilAsync(() => h.Pool.Waiters == 1, "the caller to be parked");

        for (var i = 0; i < 30; i++)
        {
            h.Time.Advance(TimeSpan.FromSeconds(1));
        }

        h.Grains.ActivationCount.Should().Be(1, "a parked caller is a call in flight");
        waiter.IsCompleted.Should().BeFalse();
        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);
        (await Wait.ForAsync(waiter, "the release to serve the waiter")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task TwoInstancesOnOneStore_ReleaseOfTheOtherInstancesAllocationWakesTheWaiter()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await using var other = new GrainFactory(h.Store, h.Store, h.Time);
        var holder = (await other.GetPoolGrain(GrainHarness.PoolId).AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(() => h.Pool.Waiters == 1, "the caller to be parked on the first instance");

        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);

        (await Wait.ForAsync(waiter, "the release to wake the other instance's waiter")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task StopAsync_FailsWaitersAndFinishesBatchesInTheStore()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(() => h.Pool.Waiters == 1, "the caller to be parked");
        h.Store.BlockAllocations = true;
        var inStore = h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "b's batch to reach the store");

        var stop = h.Grains.StopAsync();

        var waiting = () => Wait.ForAsync(waiter, "the parked caller to be failed");
        (await waiting.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        stop.IsCompleted.Should().BeFalse("a batch is still in the store");
        blocked.Release();
        (await Wait.ForAsync(inStore, "the batch in the store to be answered")).Status.Should().Be(AllocationStatus.NoCapacity);
        await Wait.ForAsync(stop, "the stop to finish");
        h.Store.Subscriptions.Should().Be(0);

        var late = () => h.Pool.AllocateAsync(new AllocationRequest("c"), TimeSpan.Zero);
        (await late.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.Unavailable);
    }

    [Fact]
    public async Task StopAsync_Canceled_FailsCallersOfBatchesStillInTheStore()
    {
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        var inStore = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the batch to reach the store");
        using var cts = new CancellationTokenSource();

        var stop = h.Grains.StopAsync(cts.Token);
        await cts.CancelAsync();

        await Wait.ForAsync(stop, "the stop to finish once told not to wait");
        var wait = () => Wait.ForAsync(inStore, "the caller to be failed");
        await wait.Should().ThrowAsync<Exception>();
        blocked.Release();
    }

    [Fact]
    public async Task RegistrationBatcher_StopAsync_FailsQueuedRegistrations()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxRegistrationBatchesInFlight = 1 });
        h.Store.BlockRegistrations = true;
        var batcher = h.Grains.GetRegistrationBatcher(GrainHarness.PoolId);
        var first = batcher.RegisterAsync(new WorkerRegistration("x1", "a:1", 1));
        var blocked = await Wait.ForAsync(h.Store.BlockedRegistration(0), "the first registration batch");
        var queued = batcher.RegisterAsync(new WorkerRegistration("x1", "a:2", 1));
        await Wait.UntilAsync(() => h.Grains.Runtime.Find<RegistrationBatcher>(GrainHarness.PoolId)!.QueuedCount == 1, "the duplicate to queue");

        var stop = h.Grains.StopAsync();

        var wait = () => Wait.ForAsync(queued, "the queued registration to be failed");
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        blocked.Release();
        (await Wait.ForAsync(first, "the registration in the store")).Status.Should().Be(RegistrationStatus.Created);
        await Wait.ForAsync(stop, "the stop to finish");
    }
}
