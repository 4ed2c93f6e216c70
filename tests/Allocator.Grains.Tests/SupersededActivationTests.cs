using Allocator.Grains.Tests.Support;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.DependencyInjection;
using Orleans.Configuration;

namespace Allocator.Grains.Tests;

/// <summary>
/// Issue 47, part 2: a pool's activation on an instance that hung (SIGSTOP, a frozen VM) is
/// superseded by an activation elsewhere; when the hung one wakes, it must change nothing it no
/// longer owns. Two in-process clusters over one store stand for the two activations of one pool
/// (as two instances share a database); the store's blocks stand for the pause, so each test
/// orders the steps (the pause, the broker's retry elsewhere, the wake) as a real pause may.
/// </summary>
public sealed class SupersededActivationTests
{
    [Fact]
    public async Task AbandonedBeforeThePause_RetryAnsweredByTheSuccessor_TheWokenActivationDoesNotEndIt()
    {
        // Hypothesis #1: the superseded activation decides from its own memory that the caller
        // who gave up left the allocation behind, and releases it; the broker's retry, answered
        // "existing, active" by the successor, is not in that memory.
        var store = await NewStoreAsync();
        await using var superseded = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        await using var successor = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        store.BlockAllocations = true;
        store.BlockReleases = true;

        // The broker's first attempt gives up while its batch is in the store.
        using var gaveUp = new CancellationTokenSource();
        var first = superseded.Pool.AllocateAsync(new AllocationRequest("broker-session"), TimeSpan.Zero, gaveUp.Token);
        var firstBatch = await Wait.ForAsync(store.BlockedAllocate(0), "the first attempt's batch to reach the store");
        await gaveUp.CancelAsync();
        var firstAnswer = () => Wait.ForAsync(first, "the first attempt to be answered");
        (await firstAnswer.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();

        // The batch commits; the activation takes the allocation for abandoned and sends its
        // release, and then the instance hangs with that release not yet in the store.
        firstBatch.Release();
        var abandonedRelease = await Wait.ForAsync(store.BlockedRelease(0), "the release of the abandoned allocation to reach the store");

        // The broker retries the same key through another instance: the pool's next activation
        // answers the allocation the first attempt made, active.
        var retry = successor.Pool.AllocateAsync(new AllocationRequest("broker-session"), TimeSpan.Zero);
        (await Wait.ForAsync(store.BlockedAllocate(1), "the retry's batch to reach the store")).Release();
        var answer = await Wait.ForAsync(retry, "the retry");
        answer.Allocation.Should().NotBeNull();
        answer.Allocation!.IsActive.Should().BeTrue("the retry is answered the allocation its first attempt made");

        // The hung instance wakes: its release goes on.
        store.BlockReleases = false;
        abandonedRelease.Release();
        await Wait.UntilAsync(async () => (await superseded.Pool.GetStatusAsync()) is { ReleaseBatchesInFlight: 0, QueuedReleases: 0 }, "the woken activation's release to settle");

        var held = await store.GetAllocationAsync(GrainHarness.PoolId, answer.Allocation.AllocationId);
        held!.IsActive.Should().BeTrue("an allocation answered active ends only by its broker's release, its lease or its worker's deregistration (invariant 11), whichever activation answered it");
    }

    [Fact]
    public async Task WaiterParkedInTheSupersededActivation_WokenAfterItsCallerLeft_AllocatesNothing()
    {
        // Hypothesis #2: a caller parked in the superseded activation is woken when its instance
        // resumes (news of a freed slot) and its batch allocates for a caller who has gone by then.
        // What it leaves behind is the fence's to refuse to release (#1): a slot held by nobody
        // until its lease ends (24 h when none was given).
        var store = await NewStoreAsync(workers: 1, capacity: 1);
        await using var superseded = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        await using var successor = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        using var gaveUp = new CancellationTokenSource();
        var (holder, waiter) = await FillThePoolAndParkAWaiterAsync(superseded, gaveUp.Token);

        // The instance hangs; the pool is activated elsewhere and serves there.
        (await successor.Pool.AllocateAsync(new AllocationRequest("other-broker"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);

        // The holder releases through the successor: the slot is free, and the news wakes the
        // parked waiter when the hung instance resumes. Its caller leaves while its batch is in
        // the store (its HTTP request timed out long ago).
        store.BlockAllocations = true;
        (await successor.Pool.ReleaseAsync(holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        var woken = await Wait.ForAsync(store.BlockedAllocate(0), "the woken waiter's batch to reach the store");
        await gaveUp.CancelAsync();
        await FluentActions.Awaiting(() => Wait.ForAsync(waiter, "the waiter to be answered")).Should().ThrowAsync<Exception>();
        woken.Release();
        await Wait.UntilAsync(() => store.AllocatesInStore == 0, "the woken batch to return");
        await Wait.UntilAsync(async () => (await superseded.Pool.GetStatusAsync()) is { ReleaseBatchesInFlight: 0, QueuedReleases: 0 }, "the superseded activation's releases to settle");

        var worker = (await store.GetWorkersAsync(GrainHarness.PoolId)).Single();
        worker.Load.Should().Be(0, "nobody holds a slot: the waiter's caller left, the holder released, and the successor answered \"no capacity\"");
    }

    [Fact]
    public async Task WaiterParkedInTheSupersededActivation_StillConnected_HearsMovedAndNothingIsAllocatedThere()
    {
        // The same waiter, whose caller is still there when the instance resumes: the superseded
        // activation allocates nothing for it and answers "moved, nothing was done", so that the
        // caller (PoolGrainCaller) sends the call again, to the pool's current activation.
        var store = await NewStoreAsync(workers: 1, capacity: 1);
        await using var superseded = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        await using var successor = await GrainHarness.CreateAsync(store: store, fakeTime: false);
        var (holder, waiter) = await FillThePoolAndParkAWaiterAsync(superseded, CancellationToken.None);
        (await successor.Pool.AllocateAsync(new AllocationRequest("other-broker"), TimeSpan.Zero)).Status.Should().Be(AllocationStatus.NoCapacity);

        (await successor.Pool.ReleaseAsync(holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        await FluentActions.Awaiting(() => Wait.ForAsync(waiter, "the waiter to be answered")).Should().ThrowAsync<PoolGrainMovedException>();
        (await store.GetWorkersAsync(GrainHarness.PoolId)).Single().Load.Should().Be(0, "the superseded activation allocated nothing");
        var retried = await successor.Pool.AllocateAsync(new AllocationRequest("waiting-broker"), TimeSpan.Zero);
        retried.Status.Should().Be(AllocationStatus.Allocated, "the call sent again reaches the pool's current activation, which serves it");
    }

    [Fact]
    public async Task RegistrationQueuedBeforeThePause_SentAfterTheWorkersRetryElsewhere_DoesNotMoveItsEpochPastTheAnswer()
    {
        // Hypothesis #3: a registration queued on the hung instance (behind a batch of its pool's
        // serialized registrations) is sent when the instance resumes, after the worker, whose call
        // timed out, registered again through another instance and was answered an epoch. The
        // late one moves the epoch past that answer: the worker's next load report is refused.
        var store = new RecordingStore(new InMemoryWorkerStore(TimeProvider.System));
        await store.UpsertPoolAsync(GrainHarness.PoolId, new PoolSettings { SerializeRegistrations = true });
        var options = new GrainOptions { CallTimeout = TimeSpan.FromSeconds(10) };
        // Orleans' own timeout of the worker's call (the same CallTimeout in the service) would also
        // cancel the queued registration when the woken instance's timer checks it; on waking, the
        // batch ahead may finish first and the queue send it on before that check: that ordering.
        await using var hung = await GrainHarness.CreateAsync(store: store, fakeTime: true, options: options,
            services: s => s.PostConfigure<SiloMessagingOptions>(o => o.ResponseTimeout = TimeSpan.FromMinutes(5)));
        await using var other = await GrainHarness.CreateAsync(store: store, fakeTime: false, options: options);
        var batcher = hung.Grains.GetRegistrationBatcher(GrainHarness.PoolId);
        store.BlockRegistrations = true;

        // Before the pause: another worker's batch is in the store, the worker's own queues behind it.
        _ = batcher.RegisterAsync(new WorkerRegistration("w-ahead", "10.0.0.9:7000", 4));
        var aheadBatch = await Wait.ForAsync(store.BlockedRegistration(0), "the batch ahead to reach the store");
        var late = batcher.RegisterAsync(new WorkerRegistration("w", "10.0.0.1:7000", 4));
        await Wait.UntilAsync(async () => (await batcher.GetStatusAsync()).Queued == 1, "the worker's registration to queue behind it");

        // The pause outlasts the call's timeout; the worker registers again through another instance.
        hung.Time.Advance(options.CallTimeout + TimeSpan.FromSeconds(1));
        var retry = other.Grains.GetRegistrationBatcher(GrainHarness.PoolId).RegisterAsync(new WorkerRegistration("w", "10.0.0.1:7000", 4));
        (await Wait.ForAsync(store.BlockedRegistration(1), "the retry's batch to reach the store")).Release();
        var answered = (await Wait.ForAsync(retry, "the retry")).Worker.Epoch;

        // The instance resumes (its callers' grain calls have timed out by its clock meanwhile).
        store.BlockRegistrations = false;
        aheadBatch.Release();
        await Wait.UntilAsync(async () => (await batcher.GetStatusAsync()) is { Queued: 0, BatchesInFlight: 0 }, "the resumed instance's registrations to settle");

        (await store.GetWorkerAsync(GrainHarness.PoolId, "w"))!.Epoch.Should().Be(answered, "a late registration never moves a worker's epoch past an answer it was given");
        (await store.ReportLoadAsync(GrainHarness.PoolId, "w", answered, 100)).Should().Be(WorkerUpdateStatus.Ok, "the worker's next load report, with the epoch it was answered, is taken");
        store.RegistrationBatches.Should().HaveCount(2, "the batch ahead and the retry's; none for the late registration");
        await FluentActions.Awaiting(() => Wait.ForAsync(late, "the late registration's call")).Should().ThrowAsync<Exception>();
    }

    /// <summary>One slot, held by a broker through <paramref name="harness"/>; a second broker parked there for room (up to a minute).</summary>
    private static async Task<(Allocation Holder, Task<AllocationOutcome> Waiter)> FillThePoolAndParkAWaiterAsync(GrainHarness harness, CancellationToken gaveUp)
    {
        var holder = (await harness.Pool.AllocateAsync(new AllocationRequest("holding-broker"), TimeSpan.Zero)).Allocation!;
        var waiter = harness.Pool.AllocateAsync(new AllocationRequest("waiting-broker"), TimeSpan.FromMinutes(1), gaveUp);
        await Wait.UntilAsync(async () => await harness.WaitersAsync() == 1, "the second broker to wait for room");
        return (holder, waiter);
    }

    private static async Task<RecordingStore> NewStoreAsync(int workers = 2, int capacity = 100)
    {
        var store = new RecordingStore(new InMemoryWorkerStore(TimeProvider.System));
        await store.UpsertPoolAsync(GrainHarness.PoolId, PoolSettings.Default with { MaxWait = TimeSpan.FromMinutes(1) });
        await store.Inner.RegisterWorkersAsync(GrainHarness.PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i}", $"10.0.0.{i}:7000", capacity))]);
        return store;
    }
}
