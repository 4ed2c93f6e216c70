using Allocator.Grains.Tests.Support;
using Allocator.Storage.InMemory;

namespace Allocator.Grains.Tests;

public sealed class PoolGrainTests
{
    private static readonly PoolSettings Waiting = new() { MaxWait = TimeSpan.FromMinutes(1) };

    [Fact]
    public async Task AllocateAsync_IdlePool_FlushesAtOnceWithoutTimeMoving()
    {
        await using var h = await GrainHarness.CreateAsync();

        // The clock never moves: an answer proves the grain added no delay of its own.
        var outcome = await Wait.ForAsync(h.Pool.AllocateAsync(new AllocationRequest("s1"), TimeSpan.Zero), "a single allocation on an idle pool");

        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Allocation!.SessionKey.Should().Be("s1");
        h.Store.AllocateBatches.Should().Equal(1);
    }

    [Fact]
    public async Task AllocateAsync_ConcurrentCalls_AreCoalescedIntoOneBatchEach()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 });
        h.Store.BlockAllocations = true;

        var first = h.Pool.AllocateAsync(new AllocationRequest("s0"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch to reach the store");
        var rest = Enumerable.Range(1, 49).Select(i => h.Pool.AllocateAsync(new AllocationRequest($"s{i}"), TimeSpan.Zero)).ToList();
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 49, "49 calls to queue in the grain behind the blocked batch");

        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedAllocate(1), "the second batch")).Release();
        var outcomes = await Wait.ForAsync(Task.WhenAll(rest.Prepend(first)), "all 50 callers to be answered");

        h.Store.AllocateBatches.Should().Equal(1, 49);
        outcomes.Select(o => o.Status).Should().AllBeEquivalentTo(AllocationStatus.Allocated);
        outcomes.Select(o => o.Allocation!.SessionKey).Should().Equal(Enumerable.Range(0, 50).Select(i => $"s{i}"), "each caller gets the outcome of its own request");
        outcomes.Select(o => o.Allocation!.AllocationId).Should().OnlyHaveUniqueItems();
    }

    [Fact]
    public async Task StoreSlots_TakenFromTheStoresConnections_HoldOtherPoolsBatchesInTheirGrains_WhichGatherMeanwhile()
    {
        // 3 connections, less 2 kept for statements outside the grains: one store slot per silo.
        var store = new RecordingStore(new InMemoryWorkerStore(TimeProvider.System)) { ConnectionLimit = 3 };
        await using var h = await GrainHarness.CreateAsync(store: store);
        foreach (var pool in new[] { GrainHarness.PoolId, "other" })
        {
            await store.Inner.UpsertPoolAsync(pool, PoolSettings.Default);
            await store.Inner.RegisterWorkersAsync(pool, [new WorkerRegistration("w", "10.0.1.1:7000", 100)]);
        }

        store.BlockAllocations = true;

        var first = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(store.BlockedAllocate(0), "the first pool's batch to reach the store");
        var others = Enumerable.Range(0, 3).Select(i => h.Grains.GetPoolGrain("other").AllocateAsync(new AllocationRequest($"o{i}"), TimeSpan.Zero)).ToList();
        await Wait.UntilAsync(async () => await h.QueuedAsync("other") == 3, "the other pool's callers to queue in its grain");

        store.AllocateBatches.Should().Equal([1], "the silo's one slot is held by the first pool's batch");
        blocked.Release();
        (await Wait.ForAsync(store.BlockedAllocate(1), "the other pool's batch, once the slot came back")).Release();
        var outcomes = await Wait.ForAsync(Task.WhenAll(others.Prepend(first)), "all callers");

        outcomes.Select(o => o.Status).Should().AllBeEquivalentTo(AllocationStatus.Allocated);
        store.AllocateBatches.Should().Equal([1, 3], "the other pool's callers gathered into one batch while they waited");
        store.MaxAllocatesInStore.Should().Be(1);
    }

    [Fact]
    public async Task AllocateAsync_BatchInFlight_KeepsAcceptingAndOverlapsBatches()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 2 });
        h.Store.BlockAllocations = true;

        var a = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero);
        var first = await Wait.ForAsync(h.Store.BlockedAllocate(0), "batch 1 to reach the store");

        // Batch 1 is still in the store: the grain accepts b and starts a second batch for it.
        var b = h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero);
        var second = await Wait.ForAsync(h.Store.BlockedAllocate(1), "batch 2 to start while batch 1 is in flight");

        // Both in flight: c gathers, and goes as soon as one batch returns.
        var c = h.Pool.AllocateAsync(new AllocationRequest("c"), TimeSpan.Zero);
        var d = h.Pool.AllocateAsync(new AllocationRequest("d"), TimeSpan.Zero);
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 2, "c and d to queue while two batches are in flight");
        first.Release();
        var third = await Wait.ForAsync(h.Store.BlockedAllocate(2), "batch 3 once batch 1 returned");
        second.Release();
        third.Release();

        var outcomes = await Wait.ForAsync(Task.WhenAll(a, b, c, d), "all callers");
        outcomes.Select(o => o.Status).Should().AllBeEquivalentTo(AllocationStatus.Allocated);
        h.Store.AllocateBatches.Should().Equal(1, 1, 2);
        h.Store.MaxAllocatesInStore.Should().Be(2);
    }

    [Fact]
    public async Task AllocateAsync_SameSessionKeyInOneBatch_ReturnsTheSameAllocation()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 });
        h.Store.BlockAllocations = true;
        var first = h.Pool.AllocateAsync(new AllocationRequest("other"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch");
        var x = h.Pool.AllocateAsync(new AllocationRequest("same"), TimeSpan.Zero);
        var y = h.Pool.AllocateAsync(new AllocationRequest("same"), TimeSpan.Zero);
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 2, "both calls to queue");
        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedAllocate(1), "the second batch")).Release();

        var outcomes = await Wait.ForAsync(Task.WhenAll(first, x, y), "all callers");

        outcomes[1].Status.Should().Be(AllocationStatus.Allocated);
        outcomes[2].Status.Should().Be(AllocationStatus.Existing);
        outcomes[2].Allocation!.AllocationId.Should().Be(outcomes[1].Allocation!.AllocationId);
    }

    [Fact]
    public async Task AllocateAsync_InvalidRequest_FailsOnlyThatCaller()
    {
        await using var h = await GrainHarness.CreateAsync();

        var bad = () => h.Pool.AllocateAsync(new AllocationRequest("s", Units: 0), TimeSpan.Zero);
        var negativeWait = () => h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.FromSeconds(-1));

        await bad.Should().ThrowAsync<ArgumentException>();
        await negativeWait.Should().ThrowAsync<ArgumentOutOfRangeException>();
        (await h.Pool.AllocateAsync(new AllocationRequest("good"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task AllocateAsync_UnknownPool_ThrowsNotFound()
    {
        await using var h = await GrainHarness.CreateAsync();

        var call = () => h.Grains.GetPoolGrain("missing").AllocateAsync(new AllocationRequest("s"), TimeSpan.FromSeconds(1));

        (await call.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
    }

    [Fact]
    public async Task AllocateAsync_NoCapacityAndNoWait_AnswersAtOnce()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);

        var outcome = await Wait.ForAsync(h.Pool.AllocateAsync(new AllocationRequest("late"), TimeSpan.Zero), "a no-wait answer");

        outcome.Status.Should().Be(AllocationStatus.NoCapacity);
        (await h.WaitersAsync()).Should().Be(0);
    }

    [Fact]
    public async Task Waiters_WokenByRelease_InArrivalOrder()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;

        List<Task<AllocationOutcome>> waiters = [];
        foreach (var name in new[] { "a", "b", "c" })
        {
            waiters.Add(h.Pool.AllocateAsync(new AllocationRequest(name), TimeSpan.FromSeconds(30)));
            await Wait.UntilAsync(async () => await h.WaitersAsync() == waiters.Count, $"'{name}' to be parked");
        }

        var current = holder;
        for (var i = 0; i < 3; i++)
        {
            await h.Store.ReleaseAsync(GrainHarness.PoolId, current.AllocationId, current.Epoch);
            var served = await Wait.ForAsync(Task.WhenAny(waiters), $"a waiter to be woken by release {i + 1}");
            served.Should().BeSameAs(waiters[0], "the longest waiting caller is served first");
            waiters.RemoveAt(0);
            current = (await served).Allocation!;
            current.SessionKey.Should().Be(new[] { "a", "b", "c" }[i]);
            await Wait.UntilAsync(async () => await h.WaitersAsync() == waiters.Count, "the others to be parked again");
            waiters.Should().NotContain(t => t.IsCompleted);
        }
    }

    [Fact]
    public async Task Waiters_WokenByRegistrationOrUndrain()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await h.Store.SetWorkerStateAsync(GrainHarness.PoolId, "w0", WorkerState.Draining);
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        await h.Store.SetWorkerStateAsync(GrainHarness.PoolId, "w0", WorkerState.Available);
        (await Wait.ForAsync(waiter, "the undrain to wake the waiter")).Status.Should().Be(AllocationStatus.Allocated);

        var second = h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the second caller to be parked");
        await h.Store.RegisterWorkersAsync(GrainHarness.PoolId, [new WorkerRegistration("w1", "10.0.0.9:7000", 1)]);
        (await Wait.ForAsync(second, "the registration to wake the waiter")).Allocation!.WorkerId.Should().Be("w1");
    }

    [Fact]
    public async Task Waiter_DeadlinePasses_AnswersNoCapacity()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(10));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        h.Time.Advance(TimeSpan.FromSeconds(9));
        waiter.IsCompleted.Should().BeFalse("the deadline has not passed");
        h.Time.Advance(TimeSpan.FromSeconds(1));

        (await Wait.ForAsync(waiter, "the deadline to answer the waiter")).Status.Should().Be(AllocationStatus.NoCapacity);
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 0, "the waiter to leave the queue");
    }

    [Fact]
    public async Task Waiter_AskingMoreThanThePoolAllows_IsBoundedByThePoolMaxWait()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: new PoolSettings { MaxWait = TimeSpan.FromSeconds(2) });
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromMinutes(5));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        h.Time.Advance(TimeSpan.FromSeconds(2));

        (await Wait.ForAsync(waiter, "the pool's maximum wait to answer the waiter")).Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task Waiter_PoolWithoutWait_AnswersAtOnce()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1);
        await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero);

        var outcome = await Wait.ForAsync(h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30)), "an answer (the pool's maximum wait is 0)");

        outcome.Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task Waiter_Canceled_LeavesTheQueueAndTakesNothing()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        using var cts = new CancellationTokenSource();
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30), cts.Token);
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        await cts.CancelAsync();

        var wait = () => Wait.ForAsync(waiter, "the canceled waiter");
        await wait.Should().ThrowAsync<OperationCanceledException>();
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 0, "the canceled waiter to leave the queue");
        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);
        var next = await h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero);
        next.Status.Should().Be(AllocationStatus.Allocated, "the freed slot was not taken for the canceled caller");
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task Waiter_LostNotification_IsServedByThePeriodicRecheck()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting);
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        // Free the slot with the notification lost.
        h.Store.SuppressNotifications = true;
        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);
        waiter.IsCompleted.Should().BeFalse();

        h.Time.Advance(TimeSpan.FromSeconds(1));

        (await Wait.ForAsync(waiter, "the re-check to serve the waiter")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task ManyWaiters_CapacityCycling_EveryCallerIsServedAndCapacityHolds()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 2, capacity: 3, settings: Waiting, options: new GrainOptions { MaxBatchSize = 4 });

        // Each caller holds its slot briefly and releases it, which wakes the next waiters.
        var callers = Enumerable.Range(0, 60).Select(i => Task.Run(async () =>
        {
            var outcome = await h.Pool.AllocateAsync(new AllocationRequest($"s{i}"), TimeSpan.FromMinutes(1));
            outcome.Status.Should().Be(AllocationStatus.Allocated);
            var workers = await h.Store.GetWorkersAsync(GrainHarness.PoolId);
            workers.Should().OnlyContain(w => w.Load <= w.Capacity);
            await Task.Yield();
            (await h.Store.ReleaseAsync(GrainHarness.PoolId, outcome.Allocation!.AllocationId, outcome.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        })).ToList();

        await Wait.ForAsync(Task.WhenAll(callers), "60 callers sharing 6 slots to be served");
        (await h.WaitersAsync()).Should().Be(0);
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).Load.Should().Be(0);
    }

    [Fact]
    public async Task SettingsChanged_IsPickedUpByTheGrain()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1);
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        (await h.Pool.AllocateAsync(new AllocationRequest("a"), TimeSpan.FromSeconds(30))).Status.Should().Be(AllocationStatus.NoCapacity, "the pool allows no wait yet");

        await h.Store.UpsertPoolAsync(GrainHarness.PoolId, Waiting with { Strategy = AllocationStrategy.Strict });

        // The change reaches the grain through the store's notification: until it has re-read the
        // settings, a caller is answered at once; then it waits.
        Task<AllocationOutcome> waiter = null!;
        await Wait.UntilAsync(
            async () =>
            {
                waiter = h.Pool.AllocateAsync(new AllocationRequest("b"), TimeSpan.FromSeconds(30));
                await Task.WhenAny(waiter, Task.Delay(50));
                return !waiter.IsCompleted && await h.WaitersAsync() == 1;
            },
            "the grain to re-read the pool's settings and park the caller");
        await h.Store.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch);
        (await Wait.ForAsync(waiter, "the release to serve the waiter")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task AllocateAsync_BatchesSlowedByQueuing_LaterRequestsGatherIntoOneBatchOnlyWhenAdaptive(bool adaptive)
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 4, AdaptiveBatchesInFlight = adaptive });
        h.Store.BlockAllocations = true;
        try
        {
            // One batch of 1 ms, then three of 10 ms, one at a time: ten times the quickest is queuing.
            var index = 0;
            foreach (var ms in new[] { 1, 10, 10, 10 })
            {
                var call = h.Pool.AllocateAsync(new AllocationRequest($"warm-{index}"), TimeSpan.Zero);
                var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(index++), "a warm-up batch");
                h.Time.Advance(TimeSpan.FromMilliseconds(ms));
                blocked.Release();
                await Wait.ForAsync(call, "a warm-up caller");
            }

            var p = h.Pool.AllocateAsync(new AllocationRequest("p"), TimeSpan.Zero);
            var inFlight = await Wait.ForAsync(h.Store.BlockedAllocate(index++), "p's batch");
            var q = h.Pool.AllocateAsync(new AllocationRequest("q"), TimeSpan.Zero);
            if (adaptive)
            {
                await Wait.UntilAsync(async () => await h.QueuedAsync() == 1, "q to queue while p's batch is in flight");
                var r = h.Pool.AllocateAsync(new AllocationRequest("r"), TimeSpan.Zero);
                await Wait.UntilAsync(async () => await h.QueuedAsync() == 2, "q and r to gather while p's batch is in flight");
                inFlight.Release();
                (await Wait.ForAsync(h.Store.BlockedAllocate(index), "the batch of q and r")).Release();
                await Wait.ForAsync(Task.WhenAll(p, q, r), "p, q and r");
                h.Store.AllocateBatches.Should().Equal(1, 1, 1, 1, 1, 2);
            }
            else
            {
                // Fixed at 4 in flight: q and r each start a batch of their own at once.
                (await Wait.ForAsync(h.Store.BlockedAllocate(index), "q's own batch")).Release();
                var r = h.Pool.AllocateAsync(new AllocationRequest("r"), TimeSpan.Zero);
                (await Wait.ForAsync(h.Store.BlockedAllocate(index + 1), "r's own batch")).Release();
                inFlight.Release();
                await Wait.ForAsync(Task.WhenAll(p, q, r), "p, q and r");
                h.Store.AllocateBatches.Should().Equal(1, 1, 1, 1, 1, 1, 1);
            }
        }
        finally
        {
            // On a failure, let every blocked batch finish so that disposing the grains does not wait forever.
            h.Store.BlockAllocations = false;
            for (var i = 0; i < 8; i++)
            {
                if (h.Store.BlockedAllocate(i) is { IsCompletedSuccessfully: true } started)
                {
                    (await started).Release();
                }
            }
        }
    }

}
