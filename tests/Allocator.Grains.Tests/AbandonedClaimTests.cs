using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// Invariant 7, nothing stuck: what a caller that gave up in the store allocated is released, also
/// when retries for its key claimed it and gave up too. Found by the quick <c>latency-jitter</c>
/// scenario on a loaded machine (2026-12-02): a broker's 94 retries of one key each gave up after
/// 60 ms, every one in the store or queued behind it, and the allocation the first of them made
/// stayed active, held by nobody, until its one-day lease.
/// </summary>
public sealed class AbandonedClaimTests
{
    private const string Key = "broker-session";

    [Fact]
    public async Task CallerGivesUpInTheStore_RetryClaimsItAndGivesUpInTheStoreToo_TheAllocationIsReleased()
    {
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var firstBatch = await HeldMeansHeldTests.GiveUpInTheStoreAsync(h, Key);

        using var retryGivesUp = new CancellationTokenSource();
        var retry = h.Pool.AllocateAsync(new AllocationRequest(Key), TimeSpan.Zero, retryGivesUp.Token);
        var retryBatch = await Wait.ForAsync(h.Store.BlockedAllocate(1), "the retry's batch to reach the store");
        await GiveUpAsync(retryGivesUp, retry);
        firstBatch.Release();
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight == 1, "the first batch to return");
        retryBatch.Release();
        await HeldMeansHeldTests.SettleAsync(h);

        await AssertReleasedAsync(h);
    }

    [Fact]
    public async Task CallerGivesUpInTheStore_RetryClaimsItAndGivesUpWhileQueued_TheAllocationIsReleased()
    {
        await using var h = await GrainHarness.CreateAsync(options: new GrainOptions { MaxBatchesInFlight = 1 });
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var firstBatch = await HeldMeansHeldTests.GiveUpInTheStoreAsync(h, Key);

        // The only batch slot is taken: the retry queues behind the first batch, claiming its key.
        using var retryGivesUp = new CancellationTokenSource();
        var retry = h.Pool.AllocateAsync(new AllocationRequest(Key), TimeSpan.Zero, retryGivesUp.Token);
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 1, "the retry to queue");
        await retryGivesUp.CancelAsync();
        var gaveUp = () => Wait.ForAsync(retry, "the retry to be answered");
        await gaveUp.Should().ThrowAsync<OperationCanceledException>("a call canceled while queued wrote nothing");
        firstBatch.Release();
        await HeldMeansHeldTests.SettleAsync(h);

        await AssertReleasedAsync(h);
        h.Store.AllocateBatches.Should().HaveCount(1, "the retry's caller had left: it never went to the store");
    }

    [Fact]
    public async Task CallerGivesUpInTheStore_RetryClaimsItAndIsAnswered_TheRetryHoldsIt()
    {
        // The other side of the same rule: a claim whose caller stays holds the allocation.
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var firstBatch = await HeldMeansHeldTests.GiveUpInTheStoreAsync(h, Key);

        using var secondGivesUp = new CancellationTokenSource();
        var second = h.Pool.AllocateAsync(new AllocationRequest(Key), TimeSpan.Zero, secondGivesUp.Token);
        var secondBatch = await Wait.ForAsync(h.Store.BlockedAllocate(1), "the second call's batch to reach the store");
        await GiveUpAsync(secondGivesUp, second);
        var third = h.Pool.AllocateAsync(new AllocationRequest(Key), TimeSpan.Zero);
        firstBatch.Release();
        secondBatch.Release();
        var thirdBatch = await Wait.ForAsync(h.Store.BlockedAllocate(2), "the third call's batch to reach the store");
        thirdBatch.Release();
        var answer = await Wait.ForAsync(third, "the third call");
        await HeldMeansHeldTests.SettleAsync(h);

        answer.Allocation.Should().NotBeNull();
        answer.Allocation!.IsActive.Should().BeTrue("the third call's caller stayed and was answered the key's allocation");
        (await h.Store.GetAllocationAsync(GrainHarness.PoolId, answer.Allocation.AllocationId))!.IsActive.Should().BeTrue("an allocation answered active is held");
    }

    private static async Task GiveUpAsync(CancellationTokenSource caller, Task<AllocationOutcome> call)
    {
        await caller.CancelAsync();
        var gaveUp = () => Wait.ForAsync(call, "the call to be answered");
        (await gaveUp.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
    }

    private static async Task AssertReleasedAsync(GrainHarness h)
    {
        var made = await h.Store.GetAllocationByKeyAsync(GrainHarness.PoolId, Key, owner: null);
        made.Should().NotBeNull("the first call's batch allocated");
        made!.IsActive.Should().BeFalse("every caller that asked for the key gave up before hearing of its allocation: nobody holds it");
    }
}
