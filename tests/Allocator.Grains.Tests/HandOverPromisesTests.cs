using Allocator.Grains.Tests.Support;
using Microsoft.Extensions.DependencyInjection;
using Orleans.Configuration;
using Orleans.Serialization.Invocation;

namespace Allocator.Grains.Tests;

/// <summary>
/// Issue 39's hypotheses about the hand-over (graceful stop, migration, resends): each test was
/// written to fail on the code before its fix.
/// </summary>
public sealed class HandOverPromisesTests
{
    private static readonly GrainOptions OneBatchAtATime = new() { MaxBatchesInFlight = 1, AdaptiveBatchesInFlight = false };

    /// <summary>
    /// Hypothesis 1: the release of an allocation whose caller gave up "must still happen"; when
    /// it was still queued in the grain (behind a release batch in the store) as the silo stopped,
    /// the stop dropped it and the slot stayed held until the lease ran out.
    /// </summary>
    [Fact]
    public async Task SiloStop_AbandonedReleaseStillInTheStore_IsStillCarriedOut()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 10, options: OneBatchAtATime);
        var held = (await h.Pool.AllocateAsync(new AllocationRequest("held"), TimeSpan.Zero)).Allocation!;

        // A broker's release in the store (the one release batch allowed in flight) ...
        h.Store.BlockReleases = true;
        var release = h.Pool.ReleaseAsync(held.AllocationId, held.Epoch);
        var releaseInStore = await Wait.ForAsync(h.Store.BlockedRelease(0), "the broker's release to reach the store");

        // ... and behind it, the release of an allocation whose caller gave up while its batch was in the store.
        h.Store.BlockAllocations = true;
        using (var cts = new CancellationTokenSource())
        {
            var gone = h.Pool.AllocateAsync(new AllocationRequest("gone"), TimeSpan.Zero, cts.Token);
            var batch = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the abandoned caller's batch to reach the store");
            await cts.CancelAsync();
            var gaveUp = () => Wait.ForAsync(gone, "the abandoned call to be answered");
            (await gaveUp.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
            h.Store.BlockAllocations = false;
            batch.Release();
        }

        // (Sent on its own with the activation's fence, issue 47: it does not wait for a batch slot.)
        await Wait.ForAsync(h.Store.BlockedRelease(1), "the abandoned allocation's release to reach the store");

        // The silo stops (no other silo to take the grain) while that release is still in the store.
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[0]);
        await Task.Delay(200);
        h.Store.BlockReleases = false;
        releaseInStore.Release();
        await UnblockReleasesUntilAsync(h, stop);
        await Wait.ForAsync(stop, "the silo to stop");

        (await release).Status.Should().Be(LeaseStatus.Ok);
        var worker = (await h.Store.GetWorkersAsync(GrainHarness.PoolId)).Single();
        worker.Load.Should().Be(0, "the abandoned allocation was released before the grain stopped, not left to its lease");
    }

    /// <summary>
    /// Hypothesis 2: an attempt whose silo was declared dead (<see cref="SiloUnavailableException"/>)
    /// may still be running where the grain lives now, so a resend answered "no capacity" does not
    /// settle the key: the first attempt can commit after it. The broker must hear "outcome unknown,
    /// retry with the same key", never a 409 while its key holds a slot.
    /// </summary>
    [Fact]
    public async Task ResendAfterAnAttemptWithUnknownOutcome_FindsNoCapacity_AnswersOutcomeUnknown_AndTheKeyFindsWhatCommitted()
    {
        var lost = new FirstAnswerLost(call => call.GetArgumentCount() > 0 && call.GetArgument(0) is AllocationRequest { SessionKey: "orphan" });
        await using var h = await GrainHarness.CreateAsync(
            workers: 1, capacity: 1, fakeTime: false,
            options: new GrainOptions { MaxBatchesInFlight = 2, AdaptiveBatchesInFlight = false },
            services: s => s.AddSingleton<IOutgoingGrainCallFilter>(lost));
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        lost.LoseAfter = h.Store.BlockedAllocate(0);

        // The first attempt reaches the grain and its store batch, but its caller hears that the
        // silo left (as when a forwarded call outlives the old silo); the caller sends it again.
        h.Store.BlockAllocations = true;
        var call = h.CallerOf(0).AllocateAsync(GrainHarness.PoolId, new AllocationRequest("orphan"), TimeSpan.Zero);
        var first = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first attempt's batch to reach the store");
        var resend = await Wait.ForAsync(h.Store.BlockedAllocate(1), "the resend's batch to reach the store");

        // The resend is decided first: the only slot is held.
        resend.Release();
        AllocationOutcome? outcome = null;
        AllocatorException? failure = null;
        try
        {
            outcome = await Wait.ForAsync(call, "the caller to be answered");
        }
        catch (AllocatorException ex)
        {
            failure = ex;
        }

        // Then the slot is freed and the first attempt commits.
        (await h.Store.Inner.ReleaseAsync(GrainHarness.PoolId, holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        h.Store.BlockAllocations = false;
        first.Release();
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight == 0, "the first attempt's batch to settle");

        var committed = (await h.Store.GetWorkersAsync(GrainHarness.PoolId)).Single().Load;
        committed.Should().Be(1, "the first attempt committed the key's allocation after the resend was answered");
        outcome.Should().BeNull($"a key that may hold a slot is never answered {outcome?.Status}");
        failure.Should().NotBeNull().And.Subject.As<AllocatorException>().OutcomeUnknown.Should().BeTrue("the broker retries with the same key");
        var retry = await h.Pool.AllocateAsync(new AllocationRequest("orphan"), TimeSpan.Zero);
        retry.Status.Should().Be(AllocationStatus.Existing, "the retry finds what the first attempt committed");
    }

    /// <summary>
    /// Seen in CI (quick rolling-restart, 6 answers of 503): a release that a stopping silo
    /// forwarded ran at the grain's next activation, but its caller heard that silo leave first
    /// (Orleans breaks a call outstanding to a silo declared dead, also one it forwarded); the
    /// repeat found the allocation ended and the broker heard "outcome unknown" for a release that
    /// had committed. The store says how it ended: by a release at this epoch, this one.
    /// </summary>
    [Fact]
    public async Task ReleaseWhoseAnswerWasLost_RepeatFindsItReleasedAtItsEpoch_AnswersOk()
    {
        var allocationId = Guid.Empty;
        var lost = new FirstAnswerLost(call => FirstAnswerLost.ReleaseOf(allocationId)(call));
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 10, fakeTime: false, services: s => s.AddSingleton<IOutgoingGrainCallFilter>(lost));
        var held = (await h.Pool.AllocateAsync(new AllocationRequest("held"), TimeSpan.Zero)).Allocation!;
        allocationId = held.AllocationId;
        lost.LoseAfter = Wait.UntilAsync(async () => (await h.Store.Inner.GetAllocationAsync(GrainHarness.PoolId, held.AllocationId))?.IsActive == false, "the release to commit");

        var result = await Wait.ForAsync(h.CallerOf(0).ReleaseAsync(GrainHarness.PoolId, held.AllocationId, held.Epoch), "the release to be answered");

        lost.Lost.Should().BeTrue();
        result.Status.Should().Be(LeaseStatus.Ok, "this release ended it; only its answer was lost");
        result.Allocation!.IsActive.Should().BeFalse();
        (await h.Store.GetWorkersAsync(GrainHarness.PoolId)).Single().Load.Should().Be(0);
    }

    /// <summary>
    /// The other side of the same rule: when the allocation ended otherwise (its worker left) while
    /// a release's answer was lost before it ran, the release did nothing, and says so ("not
    /// active"); and when the store cannot say how it ended, the outcome stays unknown.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ReleaseWhoseAnswerWasLost_AllocationEndedOtherwise_AnswersNotActive_OrUnknownWhenTheStoreCannotSay(bool storeUnreadable)
    {
        var allocationId = Guid.Empty;
        var lost = new FirstAnswerLost(call => FirstAnswerLost.ReleaseOf(allocationId)(call)) { RunsOn = false };
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 10, fakeTime: false, services: s => s.AddSingleton<IOutgoingGrainCallFilter>(lost));
        var held = (await h.Pool.AllocateAsync(new AllocationRequest("held"), TimeSpan.Zero)).Allocation!;
        allocationId = held.AllocationId;
        (await h.Store.Inner.DeregisterWorkerAsync(GrainHarness.PoolId, held.WorkerId)).Found.Should().BeTrue();
        h.Store.FailAllocationReads = storeUnreadable;

        var release = h.CallerOf(0).ReleaseAsync(GrainHarness.PoolId, held.AllocationId, held.Epoch);

        if (storeUnreadable)
        {
            var answer = () => Wait.ForAsync(release, "the release to be answered");
            (await answer.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        }
        else
        {
            (await Wait.ForAsync(release, "the release to be answered")).Status.Should().Be(LeaseStatus.NotActive, "its worker's deregistration ended it, not this release");
        }

        lost.Lost.Should().BeTrue();
    }

    /// <summary>
    /// Seen in a clean-clone run (quick upgrade, 7 answers of 503): a waiter that a stopping silo
    /// forwarded parked at the grain's next activation, but its caller heard that silo leave; the
    /// resend ran out of wait, and the broker heard "outcome unknown" since the forwarded one could
    /// still be served. Given the time (the HTTP request's limit), the caller waits until the lost
    /// attempt's wait has ended and asks once more without a wait: that answer is the key's,
    /// "no capacity" when nothing was held for it, or the allocation the forwarded one got.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WaiterWhoseAnswerWasLost_ResendRunsOutOfWait_IsAnsweredTheKeysOutcome_NotUnknown(bool forwardedGetsTheSlot)
    {
        // The forwarded attempt goes on at the grain as a call of its own (the stopping silo sent
        // it on; nothing cancels it when its caller hears the silo leave): it parks first, then
        // the caller's first attempt is lost before it is sent and the caller sends it again.
        var armed = false;
        var lost = new FirstAnswerLost(call => Volatile.Read(ref armed) && call.GetMethodName() == nameof(IPoolGrain.AllocateAsync) && call.GetArgument(0) is AllocationRequest { SessionKey: "lost" }) { RunsOn = false };
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, fakeTime: false, settings: new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) }, services: s => s.AddSingleton<IOutgoingGrainCallFilter>(lost));
        var holder = (await h.Pool.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var forwarded = h.Pool.AllocateAsync(new AllocationRequest("lost"), TimeSpan.FromSeconds(3));
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).Waiters == 1, "the forwarded attempt to park");
        Volatile.Write(ref armed, true);

        var call = h.CallerOf(0).AllocateAsync(GrainHarness.PoolId, new AllocationRequest("lost"), TimeSpan.FromSeconds(3), CancellationToken.None, new Settling(TimeSpan.FromSeconds(20), CancellationToken.None));
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).Waiters == 2, "the resend to park beside the forwarded attempt");
        if (forwardedGetsTheSlot)
        {
            // The slot goes to the longest waiting, the forwarded attempt, whose answer nobody hears.
            (await h.Pool.ReleaseAsync(holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        }

        var outcome = await Wait.ForAsync(call, "the caller to be answered");

        lost.Lost.Should().BeTrue();
        var gotten = await forwarded;
        if (forwardedGetsTheSlot)
        {
            gotten.Status.Should().Be(AllocationStatus.Allocated);
            outcome.Status.Should().Be(AllocationStatus.Existing, "the key holds the forwarded attempt's allocation");
            outcome.Allocation!.AllocationId.Should().Be(gotten.Allocation!.AllocationId);
        }
        else
        {
            gotten.Status.Should().Be(AllocationStatus.NoCapacity);
            outcome.Status.Should().Be(AllocationStatus.NoCapacity, "both waits ended with nothing held for the key");
            (await h.Pool.AllocateAsync(new AllocationRequest("lost"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity, "nothing was allocated for the key afterwards");
        }
    }

    /// <summary>
    /// Hypothesis 3: a retry answered the key's existing allocation holds it; when the first caller's
    /// endpoint then says that caller left (<see cref="IPoolGrain.AbandonAsync"/>), the grain must
    /// not release it, also when the grain moved to another silo in between.
    /// </summary>
    [Fact]
    public async Task AbandonAfterTheGrainMoved_TheRetryAnsweredBeforeTheMoveKeepsTheAllocation()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 10, silos: 2, fakeTime: false);
        var request = new AllocationRequest("left-then-retried");
        var first = (await h.Pool.AllocateAsync(request, TimeSpan.Zero)).Allocation!;
        var retry = await h.Pool.AllocateAsync(request, TimeSpan.Zero);
        retry.Status.Should().Be(AllocationStatus.Existing, "the retry is answered the allocation its key holds: that broker holds it now");

        // The silo hosting the grain stops: the grain moves to the other one.
        var host = (await h.Pool.GetStatusAsync()).Silo;
        var index = h.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == host);
        var survivor = h.GrainsOf(1 - index).GetPoolGrain(GrainHarness.PoolId);
        await Wait.ForAsync(h.Cluster.StopSiloAsync(h.Cluster.Silos[index]), "the silo hosting the grain to stop");
        (await survivor.GetStatusAsync()).Silo.Should().NotBe(host, "the grain moved");

        // Only now does the first caller's endpoint say that caller left before it heard the answer.
        (await survivor.AbandonAsync(request, first)).Should().BeFalse("a retry was answered the allocation before the grain moved");
        (await h.Store.GetAllocationAsync(GrainHarness.PoolId, first.AllocationId))!.IsActive.Should().BeTrue("held means held: the retry's broker holds it");
    }

    /// <summary>
    /// Hypothesis 4: when Orleans stops waiting for a stopping grain (its deactivation timeout)
    /// while a batch is still in the store, a caller of that batch must hear "outcome unknown"
    /// (its statement may commit), never "nothing was written".
    /// </summary>
    [Fact]
    public async Task DeactivationTimeout_BatchStillInTheStore_CallerHearsOutcomeUnknown()
    {
        await using var h = await GrainHarness.CreateAsync(
            workers: 1, capacity: 10, fakeTime: false, silos: 2,
            options: new GrainOptions { CallTimeout = TimeSpan.FromSeconds(3) },
            services: s => s.PostConfigure<GrainCollectionOptions>(o => o.DeactivationTimeout = TimeSpan.FromSeconds(1))); // cut short on purpose
        var silo = (await h.Pool.GetStatusAsync()).Silo;
        var host = h.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == silo);
        h.Store.BlockAllocations = true;

        // As the endpoint calls: through the caller, with the call's deadline (wait + grain call timeout).
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(3));
        var call = h.CallerOf(1 - host).AllocateAsync(GrainHarness.PoolId, new AllocationRequest("in-store"), TimeSpan.Zero, deadline.Token);
        var batch = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the batch to reach the store");

        // The silo hosting the grain stops; the batch does not come back within the deactivation timeout.
        var stop = h.Cluster.StopSiloAsync(h.Cluster.Silos[host]);
        Exception? answer = null;
        try
        {
            await call.WaitAsync(TimeSpan.FromSeconds(30));
        }
        catch (Exception ex) when (ex is not TimeoutException)
        {
            answer = ex;
        }

        h.Store.BlockAllocations = false;
        batch.Release();
        await Wait.ForAsync(stop, "the silo to stop");
        answer.Should().BeOfType<AllocatorException>($"the caller is answered, and not with {answer?.GetType().Name}: {answer?.Message}")
            .Which.OutcomeUnknown.Should().BeTrue("its statement may still commit: only a retry with the same key can tell");
    }

    /// <summary>
    /// Hypothesis 4, the late path: a batch whose caller gave up is still in the store when Orleans
    /// stops waiting for the stopping grain; the caller's retry is answered the allocation by the
    /// grain's next activation; the batch then settles at the old one. It must not release what
    /// the retry's broker now holds.
    /// </summary>
    [Fact]
    public async Task DeactivationTimeout_LateBatchOfACallerThatGaveUp_DoesNotReleaseWhatItsRetryHolds()
    {
        await using var h = await GrainHarness.CreateAsync(
            workers: 1, capacity: 10, fakeTime: false, silos: 2,
            services: s => s.PostConfigure<GrainCollectionOptions>(o => o.DeactivationTimeout = TimeSpan.FromSeconds(1))); // cut short on purpose
        var silo = (await h.Pool.GetStatusAsync()).Silo;
        var host = h.Cluster.Silos.ToList().FindIndex(s => s.SiloAddress.ToParsableString() == silo);
        var survivor = h.GrainsOf(1 - host).GetPoolGrain(GrainHarness.PoolId);
        h.Store.BlockAllocations = true;
        h.Store.BlockedAllocationsIgnoreCancellation = true;

        // The caller gives up while its batch is in the store (a statement sent, answered late).
        var request = new AllocationRequest("late");
        using (var cts = new CancellationTokenSource())
        {
            var call = survivor.AllocateAsync(request, TimeSpan.Zero, cts.Token);
            await Wait.ForAsync(h.Store.BlockedAllocate(0), "the batch to reach the store");
            await cts.CancelAsync();
            var gaveUp = () => Wait.ForAsync(call, "the call to be answered");
            (await gaveUp.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        }

        // The silo hosting the grain stops and Orleans stops waiting for it after a second.
        await Wait.ForAsync(h.Cluster.StopSiloAsync(h.Cluster.Silos[host]), "the silo to stop");

        // The statement commits now; a release the old activation would send waits in the store.
        h.Store.BlockReleases = true;
        h.Store.BlockAllocations = false;
        (await h.Store.BlockedAllocate(0)).Release();
        await Task.Delay(500);

        // The caller's retry reaches the grain's next activation and is answered the allocation.
        var retry = await survivor.AllocateAsync(request, TimeSpan.Zero);
        retry.Allocation.Should().NotBeNull();
        retry.Allocation!.IsActive.Should().BeTrue("the retry is answered the key's allocation, active");

        h.Store.BlockReleases = false;
        await UnblockReleasesUntilAsync(h, Task.Delay(2000), first: 0);
        (await h.Store.GetAllocationAsync(GrainHarness.PoolId, retry.Allocation.AllocationId))!.IsActive.Should().BeTrue("held means held: the retry's broker holds it");
    }

    /// <summary>
    /// The first call that <paramref name="matches"/> is sent on to the grain (unless
    /// <see cref="RunsOn"/> is off), but its caller is told that the silo hosting the grain left
    /// (<see cref="SiloUnavailableException"/>), as when a call forwarded by a stopping silo outlives it.
    /// </summary>
    private sealed class FirstAnswerLost(Func<IInvokable, bool> matches) : IOutgoingGrainCallFilter
    {
        private int _done;

        /// <summary>What the lost answer waits for (e.g. the call's batch reaching the store), so the resend comes after it.</summary>
        public Task LoseAfter { get; set; } = Task.CompletedTask;

        /// <summary>Whether the call whose answer is lost reaches the grain at all.</summary>
        public bool RunsOn { get; init; } = true;

        public bool Lost => Volatile.Read(ref _done) == 1;

        public Task Invoke(IOutgoingGrainCallContext context) =>
            matches(context.Request) && Interlocked.Exchange(ref _done, 1) == 0 ? LoseAsync(context) : context.Invoke();

        private async Task LoseAsync(IOutgoingGrainCallContext context)
        {
            if (RunsOn)
            {
                _ = context.Invoke().ContinueWith(t => t.Exception, TaskScheduler.Default); // runs on; its answer is lost
            }

            await LoseAfter;
            throw new SiloUnavailableException("The silo hosting the grain left the cluster (test).");
        }

        /// <summary>A release of <paramref name="allocationId"/>.</summary>
        public static Func<IInvokable, bool> ReleaseOf(Guid allocationId) =>
            call => call.GetMethodName() == nameof(IPoolGrain.ReleaseAsync) && call.GetArgument(0) is Guid id && id == allocationId;
    }

    /// <summary>Lets every release batch that was blocked in the store (before the block was lifted) go on, until <paramref name="done"/>.</summary>
    private static async Task UnblockReleasesUntilAsync(GrainHarness h, Task done, int first = 1)
    {
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        for (var i = first; !done.IsCompleted && !limit.IsCancellationRequested;)
        {
            if (h.Store.BlockedRelease(i).IsCompleted)
            {
                (await h.Store.BlockedRelease(i)).Release();
                i++;
            }
            else
            {
                await Task.WhenAny(done, Task.Delay(20, CancellationToken.None));
            }
        }
    }
}
