using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>What a stopping or moving activation does with what it holds, and what it hands to the next one.</summary>
public sealed class ActivationHandOverTests
{
    [Fact]
    public async Task StopAccepting_Moving_AnswersParkedAndQueuedCallersMoved_Once()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 1);
        await parts.AllocatedAsync("holder");
        var parked = parts.Caller("parked", maxWait: TimeSpan.FromSeconds(30));
        await parts.AllocationBatches.RunAsync(parts.Admitted(parked));
        var queued = parts.Caller("queued");
        parts.Allocations.Enqueue(queued);

        parts.HandOver.StopAccepting(handingOver: true);
        parts.HandOver.StopAccepting(handingOver: false);
        parts.RunTurns(); // the flush queued before the stop starts nothing

        foreach (var caller in new[] { parked, queued })
        {
            var wait = () => caller.Completion.Task;
            await wait.Should().ThrowAsync<PoolGrainMovedException>("nothing was done: the caller sends the call again");
        }

        parts.FeedsStopped.Should().Be(1);
        parts.Stage.HandingOver.Should().BeTrue("the first stop decides");
        parts.Waiters.Count.Should().Be(0);
        parts.Store.AllocateBatches.Should().Equal([1], "only the parked caller's batch, before the stop");
    }

    [Fact]
    public async Task StopAccepting_NowhereToMove_AnswersUnavailable_NothingDone()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var queued = parts.Caller("queued");
        parts.Allocations.Enqueue(queued);

        parts.HandOver.StopAccepting(handingOver: false);

        var wait = () => queued.Completion.Task;
        var error = (await wait.Should().ThrowAsync<AllocatorException>()).Which;
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeFalse();
    }

    [Fact]
    public async Task StopAccepting_AQueuedReleaseOfAnAbandonedAllocationIsStillSent_ACallersReleaseHearsMoved()
    {
        // Issue 39, #1: nobody will send the abandoned one again; the caller of the other will.
        var parts = await PoolGrainParts.CreateAsync(capacity: 2);
        var abandoned = await parts.AllocatedAsync("gone");
        var held = await parts.AllocatedAsync("held");
        parts.Abandoned.AbandonedAfterAnswer("gone", parts.Time.GetUtcNow());
        parts.ReleaseBatches.ReleaseAbandoned("gone", abandoned);
        var callers = new PendingRelease(new LeaseRelease(held.AllocationId, held.Epoch), span: null);
        parts.Releases.Enqueue(callers);

        parts.HandOver.StopAccepting(handingOver: true);
        await Wait.ForAsync(parts.ReleaseBatches.WhenDirectReleasesDoneAsync(), "the direct release");

        (await parts.IsActiveAsync(abandoned)).Should().BeFalse();
        (await parts.IsActiveAsync(held)).Should().BeTrue();
        var wait = () => callers.Completion.Task;
        await wait.Should().ThrowAsync<PoolGrainMovedException>();
        parts.Abandoned.Count.Should().Be(0);
    }

    [Fact]
    public async Task FinishInFlight_LetsTheBatchInTheStoreCommitAndAnswer()
    {
        var parts = await PoolGrainParts.CreateAsync();
        parts.Store.BlockAllocations = true;
        var inStore = parts.Caller("in-store");
        parts.Allocations.Enqueue(inStore);
        parts.RunTurns();
        var blocked = await Wait.ForAsync(parts.Store.BlockedAllocate(0), "the batch to reach the store");
        parts.HandOver.StopAccepting(handingOver: true);

        var finishing = parts.HandOver.FinishInFlightAsync(CancellationToken.None);
        finishing.IsCompleted.Should().BeFalse();
        blocked.Release();
        await Wait.ForAsync(finishing, "the batch in flight");

        (await inStore.Completion.Task).Status.Should().Be(AllocationStatus.Allocated, "a batch already in the store goes on");
        parts.Stage.GivenUpByOrleans.Should().BeFalse();
        parts.Abort.IsCancellationRequested.Should().BeFalse();
    }

    [Fact]
    public async Task FinishInFlight_OrleansStopsWaiting_CallersHearOutcomeUnknown_BeforeTheStoreCallsAreCanceled()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 2);
        var holder = await parts.AllocatedAsync("holder");
        parts.Store.BlockAllocations = true;
        parts.Store.BlockReleases = true;
        var allocating = parts.Caller("allocating");
        var releasing = new PendingRelease(new LeaseRelease(holder.AllocationId, holder.Epoch), span: null);
        parts.Allocations.Enqueue(allocating);
        parts.Releases.Enqueue(releasing);
        parts.RunTurns();
        var batchesDone = Task.WhenAll(parts.Allocations.WhenInFlightDoneAsync(), parts.Releases.WhenInFlightDoneAsync());
        await Wait.ForAsync(parts.Store.BlockedAllocate(0), "the allocation batch to reach the store");
        await Wait.ForAsync(parts.Store.BlockedRelease(0), "the release batch to reach the store");
        var answeredWhenCanceled = false;
        using var registration = parts.Abort.Token.Register(() => answeredWhenCanceled = allocating.Completion.Task.IsCompleted && releasing.Completion.Task.IsCompleted);
        parts.HandOver.StopAccepting(handingOver: true);
        using var deactivationTimeout = new CancellationTokenSource();
        await deactivationTimeout.CancelAsync();

        await parts.HandOver.FinishInFlightAsync(deactivationTimeout.Token);

        answeredWhenCanceled.Should().BeTrue("a canceled store call must not answer them 'nothing was written'");
        var allocatingWait = () => allocating.Completion.Task;
        (await allocatingWait.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        var releasingWait = () => releasing.Completion.Task;
        (await releasingWait.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        parts.Stage.GivenUpByOrleans.Should().BeTrue();
        await Wait.ForAsync(batchesDone, "the canceled batches to end");
    }

    [Fact]
    public async Task FinishInFlight_OrleansStopsWaiting_AnAllocationWhoseCallerLeftIsThenLeftToItsLease()
    {
        // Issue 39, #4: the next activation may already have answered a retry of the key with it.
        var parts = await PoolGrainParts.CreateAsync();
        parts.Store.BlockAllocations = true;
        parts.Store.BlockedAllocationsIgnoreCancellation = true; // the statement was sent: it commits whatever happens here
        var gone = parts.Caller("gone");
        parts.Allocations.Enqueue(gone);
        parts.RunTurns();
        var batchDone = parts.Allocations.WhenInFlightDoneAsync();
        var blocked = await Wait.ForAsync(parts.Store.BlockedAllocate(0), "the batch to reach the store");
        parts.Replies.GiveUp(gone, CancellationToken.None);
        parts.HandOver.StopAccepting(handingOver: true);
        using var deactivationTimeout = new CancellationTokenSource();
        await deactivationTimeout.CancelAsync();
        await parts.HandOver.FinishInFlightAsync(deactivationTimeout.Token);

        blocked.Release();
        await Wait.ForAsync(batchDone, "the batch to commit");

        (await parts.Store.Inner.GetPoolStatisticsAsync(parts.PoolId)).ActiveAllocations.Should().Be(1);
        parts.Store.ReleaseBatches.Should().BeEmpty();
        parts.ReleaseBatches.DirectInFlight.Should().Be(0);
        parts.Abandoned.Count.Should().Be(0);
    }

    [Fact]
    public void ToCarry_AndTakeOver_TheNextActivationKeepsTheKeysARetryWasAnswered()
    {
        var now = new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);
        var leaving = new AbandonedKeys();
        leaving.AnsweredExisting("k", Made("k", now.AddSeconds(-1)), now);

        var carried = ActivationHandOver.ToCarry(leaving, now);
        var arriving = new AbandonedKeys();
        ActivationHandOver.TakeOver(arriving, carried!);

        carried!.ReplayedKeys.Should().Equal("k");
        arriving.AbandonedAfterAnswer("k", now.AddSeconds(1)).Should().BeFalse("the retry's broker holds it (issue 39, #3)");
        arriving.AbandonedAfterAnswer("other", now.AddSeconds(1)).Should().BeTrue();
    }

    [Fact]
    public void ToCarry_NothingRemembered_CarriesNothing()
    {
        ActivationHandOver.ToCarry(new AbandonedKeys(), DateTimeOffset.UnixEpoch).Should().BeNull("a move without promises adds no key");
    }

    private static Allocation Made(string key, DateTimeOffset createdAt) => new()
    {
        AllocationId = Guid.NewGuid(),
        PoolId = "p",
        WorkerId = "w",
        Address = "a:1",
        SessionKey = key,
        Units = 1,
        Epoch = 1,
        CreatedAt = createdAt,
    };
}
