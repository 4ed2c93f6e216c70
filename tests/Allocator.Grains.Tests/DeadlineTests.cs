using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// A caller that gives up never leaves an allocation nobody holds: queued, it takes nothing; in
/// the store, its allocation is released when the batch commits; past its deadline, its request
/// goes to no batch at all.
/// </summary>
public sealed class DeadlineTests
{
    [Fact]
    public async Task CallerGivesUp_WhileItsBatchIsInTheStore_HearsOutcomeUnknown_AndTheGrainReleasesItsAllocation()
    {
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        using var cts = new CancellationTokenSource();
        var call = h.Pool.AllocateAsync(new AllocationRequest("gone"), TimeSpan.Zero, cts.Token);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the batch to reach the store");

        await cts.CancelAsync();
        var wait = () => Wait.ForAsync(call, "the grain to acknowledge the cancellation");
        var error = (await wait.Should().ThrowAsync<AllocatorException>()).Which;
        error.OutcomeUnknown.Should().BeTrue("its batch is in the store: whether it commits is not known yet");

        // The batch commits after the caller gave up: the grain must not leave that allocation behind.
        blocked.Release();
        await Wait.UntilAsync(() => h.Store.ReleaseBatches.Count == 1, "the grain to release the allocation its caller gave up on");
        await Wait.UntilAsync(async () => (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).ActiveAllocations == 0, "the release to commit");
        h.Store.ReleaseBatches.Should().Equal([1], "one release batch, made by the grain itself");
        (await h.Store.GetWorkersAsync(GrainHarness.PoolId)).Should().OnlyContain(w => w.Load == 0);
    }

    [Fact]
    public async Task CallerGivesUp_WhileItsBatchIsInTheStore_AndTheBatchCommitsButIsLost_TheSameKeyFindsTheAllocation()
    {
        // Before: the caller heard "canceled" (503 "nothing is held" over HTTP) while a batch that
        // then failed with an unknown outcome had committed its allocation, which nobody released.
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        using var cts = new CancellationTokenSource();
        var call = h.Pool.AllocateAsync(new AllocationRequest("lost"), TimeSpan.Zero, cts.Token);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the batch to reach the store");

        await cts.CancelAsync();
        var wait = () => Wait.ForAsync(call, "the grain to acknowledge the cancellation");
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();

        h.Store.LoseAfterCommit = true;
        blocked.Release();
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight == 0, "the lost batch to return");
        h.Store.BlockAllocations = false;
        h.Store.LoseAfterCommit = false;

        var replay = await Wait.ForAsync(h.Pool.AllocateAsync(new AllocationRequest("lost"), TimeSpan.Zero), "the replay with the same key");
        replay.Status.Should().Be(AllocationStatus.Existing, "the retry the caller was told to make finds what committed");
        h.Store.ReleaseBatches.Should().BeEmpty("the grain never learnt of the allocation, so only the caller's retry can");
    }

    [Fact]
    public async Task CallerGivesUp_WhileQueued_NothingIsWrittenForIt()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1, AdaptiveBatchesInFlight = false });
        h.Store.BlockAllocations = true;
        var first = h.Pool.AllocateAsync(new AllocationRequest("first"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch to reach the store");
        using var cts = new CancellationTokenSource();
        var queued = h.Pool.AllocateAsync(new AllocationRequest("queued"), TimeSpan.Zero, cts.Token);
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 1, "the second call to queue behind the blocked batch");

        await cts.CancelAsync();
        var wait = () => Wait.ForAsync(queued, "the canceled call");
        await wait.Should().ThrowAsync<OperationCanceledException>();
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 0, "the canceled request to leave the queue");
        blocked.Release();
        await Wait.ForAsync(first, "the first caller");

        h.Store.AllocateBatches.Should().Equal([1], "the canceled request never reached the store");
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task RequestStillQueuedAtItsCallDeadline_GoesToNoBatch()
    {
        // No cancellation reaches the grain (as when the caller's silo died): the grain's own
        // deadline (wait + call timeout) keeps the request out of the store.
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1, AdaptiveBatchesInFlight = false, CallTimeout = TimeSpan.FromSeconds(5) });
        h.Store.BlockAllocations = true;
        var first = h.Pool.AllocateAsync(new AllocationRequest("first"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch to reach the store");
        var late = h.Pool.AllocateAsync(new AllocationRequest("late"), TimeSpan.Zero);
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 1, "the second call to queue");

        h.Time.Advance(TimeSpan.FromSeconds(5));
        blocked.Release();

        await Wait.ForAsync(first, "the first caller");
        var wait = () => Wait.ForAsync(late, "the late caller");
        var error = (await wait.Should().ThrowAsync<AllocatorException>()).Which;
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.Message.Should().Contain("nothing was written");
        h.Store.AllocateBatches.Should().Equal([1]);
    }
}

/// <summary>A request is answered as soon as its own statement committed, not when its whole batch returns.</summary>
public sealed class EarlyAnswerTests
{
    [Fact]
    public async Task Allocation_CommittedWhileItsBatchStillRuns_IsAnsweredAtOnce()
    {
        await using var h = await GrainHarness.CreateAsync();
        var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        h.Store.HoldAfterCommit = gate;

        var outcome = await Wait.ForAsync(h.Pool.AllocateAsync(new AllocationRequest("early"), TimeSpan.Zero), "the committed allocation to be answered while its batch is still in the store");

        outcome.Status.Should().Be(AllocationStatus.Allocated);
        (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight.Should().Be(1, "the batch has not returned yet");
        gate.SetResult();
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight == 0, "the batch to return");
        (await h.Store.GetPoolStatisticsAsync(GrainHarness.PoolId)).ActiveAllocations.Should().Be(1, "answered once, allocated once");
    }

    [Fact]
    public async Task EveryRequest_CarriesItsCallDeadline_IntoTheStore()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { CallTimeout = TimeSpan.FromSeconds(7) });
        var start = h.Time.GetUtcNow();

        await h.Pool.AllocateAsync(new AllocationRequest("d"), TimeSpan.FromSeconds(3));

        h.Store.AllocateRequests.Single().Deadline.Should().Be(start + TimeSpan.FromSeconds(10), "its wait plus the grain call timeout, from its arrival");
    }
}

/// <summary>Every allocation made through the grains has a lease: every call can time out.</summary>
public sealed class LeaseRuleTests
{
    [Theory]
    [InlineData(null, null, 24 * 3600)] // neither request nor pool: the fallback lease
    [InlineData(null, 3600, 3600)] // the pool's default
    [InlineData(300, null, 300)] // the request's own
    [InlineData(300, 3600, 300)]
    public async Task Allocation_AlwaysHasALease(int? requestSeconds, int? poolSeconds, int expectedSeconds)
    {
        await using var h = await GrainHarness.CreateAsync(settings: new PoolSettings { DefaultLease = poolSeconds is { } p ? TimeSpan.FromSeconds(p) : null });
        var now = h.Time.GetUtcNow();

        var outcome = await h.Pool.AllocateAsync(new AllocationRequest("s", Lease: requestSeconds is { } r ? TimeSpan.FromSeconds(r) : null), TimeSpan.Zero);

        outcome.Allocation!.ExpiresAt.Should().Be(now + TimeSpan.FromSeconds(expectedSeconds));
    }
}
