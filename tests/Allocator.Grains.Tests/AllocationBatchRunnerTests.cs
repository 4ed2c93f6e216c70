using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>An allocation batch in the store, and what becomes of each caller in it: answered, parked, or gone.</summary>
public sealed class AllocationBatchRunnerTests
{
    [Fact]
    public async Task Run_AnswersEachCallerItsOutcome_AndReportsTheStoreTime()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 2);
        var a = parts.Caller("a");
        var b = parts.Caller("b");

        var storeTime = await parts.AllocationBatches.RunAsync(parts.Admitted(a, b));
        parts.RunTurns(); // the store's word of each commit comes after the batch answered: nothing more happens

        storeTime.Should().NotBeNull("a batch the store answered feeds the adaptive limit");
        (await a.Completion.Task).Status.Should().Be(AllocationStatus.Allocated);
        (await b.Completion.Task).Status.Should().Be(AllocationStatus.Allocated);
        parts.Store.AllocateBatches.Should().Equal(2);
        parts.Abandoned.Count.Should().Be(0, "every request for a key that entered the store settled");
        parts.LeaveIfAskedCalls.Should().Be(1);
    }

    [Fact]
    public async Task Run_NoCapacity_ParksACallerThatMayWait_AndAnswersOneThatMayNot()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 1);
        await parts.AllocatedAsync("holder");
        var patient = parts.Caller("patient", maxWait: TimeSpan.FromSeconds(30));
        var impatient = parts.Caller("impatient");

        await parts.AllocationBatches.RunAsync(parts.Admitted(patient, impatient));

        (await impatient.Completion.Task).Status.Should().Be(AllocationStatus.NoCapacity);
        patient.Completion.Task.IsCompleted.Should().BeFalse("it waits for capacity");
        patient.InStore.Should().BeFalse("parked in memory: a cancellation now leaves nothing behind");
        parts.Waiters.Count.Should().Be(1);
        parts.DeadlineTimer.DueTimes.Should().Equal(TimeSpan.FromSeconds(30));
    }

    [Fact]
    public async Task Run_NoCapacityWhileTheGrainStops_AnswersMoved_AndParksNobody()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 1);
        await parts.AllocatedAsync("holder");
        var patient = parts.Caller("patient", maxWait: TimeSpan.FromSeconds(30));
        var batch = parts.Admitted(patient);
        parts.Stage.Stop(handingOver: true);

        await parts.AllocationBatches.RunAsync(batch);

        var wait = () => patient.Completion.Task;
        await wait.Should().ThrowAsync<PoolGrainMovedException>("nothing was written for it: its caller sends the call again");
        parts.Waiters.Count.Should().Be(0);
    }

    [Fact]
    public async Task Run_AfterALaterActivationClaimedThePool_AllocatesNothing_AnswersMoved_AndTheGrainLeaves()
    {
        // Issue 47, #2: this activation's instance hung and the pool was activated elsewhere.
        var parts = await PoolGrainParts.CreateAsync(capacity: 2);
        var first = parts.Caller("before-the-pause");
        await parts.AllocationBatches.RunAsync(parts.Admitted(first)); // this activation's claim comes with its first batch
        (await first.Completion.Task).Status.Should().Be(AllocationStatus.Allocated);
        await parts.Store.Inner.ClaimPoolActivationAsync(parts.PoolId); // the successor's
        var a = parts.Caller("a");
        var b = parts.Caller("b", maxWait: TimeSpan.FromSeconds(30));

        var storeTime = await parts.AllocationBatches.RunAsync(parts.Admitted(a, b));

        storeTime.Should().BeNull("the store refused the batch");
        await FluentActions.Awaiting(() => a.Completion.Task).Should().ThrowAsync<PoolGrainMovedException>("nothing was written for it: its caller sends the call again");
        await FluentActions.Awaiting(() => b.Completion.Task).Should().ThrowAsync<PoolGrainMovedException>("nor is it parked here");
        parts.Waiters.Count.Should().Be(0);
        parts.SupersededCalls.Should().Be(1, "the grain stops and leaves");
        (await parts.Store.Inner.GetWorkersAsync(parts.PoolId)).Sum(w => w.Load).Should().Be(1, "only the allocation made before the pause holds a slot");
    }

    [Fact]
    public async Task Run_ThePoolIsGone_FailsEveryCaller_AndTheGrainForgetsThePool()
    {
        var parts = await PoolGrainParts.CreateAsync(createPool: false);
        var a = parts.Caller("a");

        var storeTime = await parts.AllocationBatches.RunAsync(parts.Admitted(a));

        storeTime.Should().BeNull();
        var wait = () => a.Completion.Task;
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
        parts.PoolMissingCalls.Should().Be(1);
        parts.LeaveIfAskedCalls.Should().Be(1);
        parts.Abandoned.Count.Should().Be(0);
    }

    [Fact]
    public async Task Committed_IsAnsweredInTheNextTurn_BeforeTheBatchReturns()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var gate = new TaskCompletionSource();
        parts.Store.HoldAfterCommit = gate; // a retry or fallback statement of the batch still runs
        var a = parts.Caller("a");

        var run = parts.AllocationBatches.RunAsync(parts.Admitted(a));
        a.Completion.Task.IsCompleted.Should().BeFalse("the word of the commit came from the store's thread: it is handled in a turn");
        parts.RunTurns();

        a.Completion.Task.IsCompletedSuccessfully.Should().BeTrue();
        run.IsCompleted.Should().BeFalse();
        gate.SetResult();
        await run;
        (await a.Completion.Task).Status.Should().Be(AllocationStatus.Allocated);
        parts.Abandoned.Count.Should().Be(0, "settled once, by the early answer");
    }

    [Fact]
    public async Task CallerGaveUpInTheStore_WhatItsBatchAllocatedIsReleased()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var gone = parts.Caller("gone");
        var batch = parts.Admitted(gone);
        parts.Replies.GiveUp(gone, CancellationToken.None).Should().BeTrue();

        await parts.AllocationBatches.RunAsync(batch);
        parts.Releases.Pending.Should().Be(0, "its release goes to the store on its own, with the activation's fence (issue 47)");
        parts.RunTurns();

        var wait = () => gone.Completion.Task;
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        parts.Store.ReleaseBatches.Should().Equal(1);
        (await parts.Store.Inner.GetPoolStatisticsAsync(parts.PoolId)).ActiveAllocations.Should().Be(0);
        parts.Abandoned.Count.Should().Be(0);
        parts.Logger.Collector.GetSnapshot().Should().Contain(r => r.Message.StartsWith("Releasing allocation", StringComparison.Ordinal));
    }

    [Fact]
    public async Task CallerGaveUpInTheStore_ButARetryForItsKeyArrived_TheAllocationIsTheRetrys()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var gone = parts.Caller("k");
        var batch = parts.Admitted(gone);
        var retry = parts.Caller("k"); // queued behind the batch, as the grain's Go queues it
        parts.Abandoned.Claim("k", () => throw new InvalidOperationException("nothing to wait for")).Should().BeFalse();
        parts.Allocations.Enqueue(retry);
        parts.Replies.GiveUp(gone, CancellationToken.None);

        await parts.AllocationBatches.RunAsync(batch);

        parts.Releases.Pending.Should().Be(0);
        (await parts.Store.Inner.GetPoolStatisticsAsync(parts.PoolId)).ActiveAllocations.Should().Be(1, "invariant 11: held means held");
    }

    [Fact]
    public async Task Admit_PastTheCallDeadline_AnswersNothingWritten_AndSendsNothing()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var late = parts.Caller("late");
        parts.Time.Advance(parts.Options.CallTimeout);

        parts.AllocationBatches.Admit(late).Should().BeFalse();

        var wait = () => late.Completion.Task;
        var error = (await wait.Should().ThrowAsync<AllocatorException>()).Which;
        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeFalse("it never reached the store");
        late.InStore.Should().BeFalse();
    }

    [Fact]
    public async Task Admit_WhileAReleaseOfItsKeyIsInTheStore_HoldsItBack_UntilTheReleaseSettles()
    {
        var parts = await PoolGrainParts.CreateAsync();
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow()).Should().BeTrue(); // the grain releases k's allocation
        var retry = parts.Caller("k");

        parts.AllocationBatches.Admit(retry).Should().BeFalse();
        retry.InStore.Should().BeFalse();
        parts.Allocations.Pending.Should().Be(0);
        parts.Abandoned.Released("k");

        parts.Allocations.QueuedItems.Should().Equal(retry);
        parts.RunTurns();
        (await retry.Completion.Task).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task Resume_WhileTheGrainStops_AnswersUnavailable()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var held = parts.Caller("k");
        parts.Stage.Stop(handingOver: false);

        parts.AllocationBatches.Resume(held);

        var wait = () => held.Completion.Task;
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.Message.Should().Contain("nothing was done");
        parts.Allocations.Pending.Should().Be(0);
    }
}
