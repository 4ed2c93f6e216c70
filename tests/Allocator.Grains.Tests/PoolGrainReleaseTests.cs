using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>Releases through the pool grain: group commit like allocations, and waking local waiters.</summary>
public sealed class PoolGrainReleaseTests
{
    [Fact]
    public async Task ReleaseAsync_IdlePool_FlushesAtOnceWithoutTimeMoving()
    {
        await using var h = await GrainHarness.CreateAsync();
        var allocation = (await h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.Zero)).Allocation!;

        // The clock never moves: an answer proves the grain added no delay of its own.
        var result = await Wait.ForAsync(h.Pool.ReleaseAsync(allocation.AllocationId, allocation.Epoch), "a single release on an idle pool");

        result.Status.Should().Be(LeaseStatus.Ok);
        result.Allocation!.IsActive.Should().BeFalse();
        h.Store.ReleaseBatches.Should().Equal(1);
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).Load.Should().Be(0);
    }

    [Fact]
    public async Task ReleaseAsync_ConcurrentCalls_AreCoalescedAndEachCallerGetsItsOwnResult()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 });
        var allocations = new List<Allocation>();
        for (var i = 0; i < 30; i++)
        {
            allocations.Add((await h.Pool.AllocateAsync(new AllocationRequest($"s{i}"), TimeSpan.Zero)).Allocation!);
        }

        h.Store.BlockReleases = true;
        var first = h.Pool.ReleaseAsync(allocations[0].AllocationId, allocations[0].Epoch);
        var blocked = await Wait.ForAsync(h.Store.BlockedRelease(0), "the first release batch to reach the store");

        // Behind it: 28 current releases, a stale epoch, an unknown id and a repeat of an id.
        var calls = new List<(Task<LeaseResult> Call, LeaseStatus Expected, Guid? Id)>();
        for (var i = 1; i < 29; i++)
        {
            calls.Add((h.Pool.ReleaseAsync(allocations[i].AllocationId, allocations[i].Epoch), LeaseStatus.Ok, allocations[i].AllocationId));
        }

        calls.Add((h.Pool.ReleaseAsync(allocations[29].AllocationId, allocations[29].Epoch + 1), LeaseStatus.StaleEpoch, allocations[29].AllocationId));
        calls.Add((h.Pool.ReleaseAsync(Guid.NewGuid(), 1), LeaseStatus.NotFound, null));
        calls.Add((h.Pool.ReleaseAsync(allocations[1].AllocationId, allocations[1].Epoch), LeaseStatus.NotActive, allocations[1].AllocationId));
        await Wait.UntilAsync(async () => await QueuedReleasesAsync(h) == calls.Count, $"{calls.Count} releases to queue behind the blocked batch");

        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedRelease(1), "the second release batch")).Release();
        (await Wait.ForAsync(first, "the first release")).Status.Should().Be(LeaseStatus.Ok);
        var results = await Wait.ForAsync(Task.WhenAll(calls.Select(c => c.Call)), "every release caller to be answered");

        h.Store.ReleaseBatches.Should().Equal([1, calls.Count], "releases that arrive while a batch is in flight go to the store together");
        results.Select(r => r.Status).Should().Equal(calls.Select(c => c.Expected), "each caller gets the result of its own release");
        results.Select(r => r.Allocation?.AllocationId).Should().Equal(calls.Select(c => c.Id));
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).ActiveAllocations.Should().Be(1, "only the stale release left its allocation active");
    }

    [Fact]
    public async Task ReleaseAsync_WakesALocalWaiter_WithoutTheStoreNotification()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) });
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = h.Pool.AllocateAsync(new AllocationRequest("waiter"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        // No notification and no time passing: only the grain's own release can wake the waiter.
        h.Store.SuppressNotifications = true;
        (await Wait.ForAsync(h.Pool.ReleaseAsync(holder.AllocationId, holder.Epoch), "the release")).Status.Should().Be(LeaseStatus.Ok);

        var outcome = await Wait.ForAsync(waiter, "the release to wake the waiter");
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Allocation!.SessionKey.Should().Be("waiter");
        (await h.WaitersAsync()).Should().Be(0);
    }

    [Fact]
    public async Task ReleaseAsync_CanceledWhileQueued_LeavesTheQueueAndReleasesNothing()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 });
        var kept = (await h.Pool.AllocateAsync(new AllocationRequest("kept"), TimeSpan.Zero)).Allocation!;
        var other = (await h.Pool.AllocateAsync(new AllocationRequest("other"), TimeSpan.Zero)).Allocation!;
        h.Store.BlockReleases = true;
        var first = h.Pool.ReleaseAsync(other.AllocationId, other.Epoch);
        var blocked = await Wait.ForAsync(h.Store.BlockedRelease(0), "the first release batch");
        using var cancel = new CancellationTokenSource();
        var queued = h.Pool.ReleaseAsync(kept.AllocationId, kept.Epoch, cancellationToken: cancel.Token);
        await Wait.UntilAsync(async () => await QueuedReleasesAsync(h) == 1, "the second release to queue");

        await cancel.CancelAsync();
        var act = () => Wait.ForAsync(queued, "the canceled release");
        await act.Should().ThrowAsync<OperationCanceledException>();
        await Wait.UntilAsync(async () => await QueuedReleasesAsync(h) == 0, "the canceled release to leave the queue");
        blocked.Release();
        await Wait.ForAsync(first, "the first release");

        h.Store.ReleaseBatches.Should().Equal(1);
        (await h.Store.GetAllocationAsync(GrainHarness.PoolId, kept.AllocationId))!.IsActive.Should().BeTrue();
    }

    [Fact]
    public async Task ReleaseAsync_StoreNeverAnswers_FailsTheCallerAfterTheCallTimeout_AndTheReleaseMayStillCommit()
    {
        // The call timeout is Orleans' response timeout: the caller hears TimeoutException and
        // the grain is asked to cancel the request (CancelRequestOnTimeout); a release already in
        // the store cannot be withdrawn, so the grain lets its caller go and the release commits
        // when the store answers.
        var callTimeout = TimeSpan.FromSeconds(1);
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { CallTimeout = callTimeout }, fakeTime: false);
        var allocation = (await h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.Zero)).Allocation!;
        h.Store.BlockReleases = true;
        var call = h.Pool.ReleaseAsync(allocation.AllocationId, allocation.Epoch);
        var blocked = await Wait.ForAsync(h.Store.BlockedRelease(0), "the batch to reach the store");

        // Orleans measures a request's age on the real clock (this harness runs on it) and checks
        // it every second. The message tells its TimeoutException from Wait's own.
        var wait = () => Wait.ForAsync(call, "the call timeout");
        (await wait.Should().ThrowAsync<TimeoutException>()).WithMessage("Response did not arrive on time*", "Orleans' response timeout answers, not the test's own limit");

        blocked.Release();
        await Wait.UntilAsync(async () => (await h.Store.GetAllocationAsync(GrainHarness.PoolId, allocation.AllocationId))!.IsActive == false, "the release to commit");
    }

    private static async Task<int> QueuedReleasesAsync(GrainHarness h) => (await h.Pool.GetStatusAsync()).QueuedReleases;
}
