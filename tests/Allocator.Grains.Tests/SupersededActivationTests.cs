using Allocator.Grains.Tests.Support;
using Allocator.Storage.InMemory;

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

    private static async Task<RecordingStore> NewStoreAsync()
    {
        var store = new RecordingStore(new InMemoryWorkerStore(TimeProvider.System));
        await store.UpsertPoolAsync(GrainHarness.PoolId, PoolSettings.Default);
        await store.Inner.RegisterWorkersAsync(GrainHarness.PoolId, [new WorkerRegistration("w0", "10.0.0.0:7000", 100), new WorkerRegistration("w1", "10.0.0.1:7000", 100)]);
        return store;
    }
}
