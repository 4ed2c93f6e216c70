using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>
/// Invariant 11, held means held: an allocation answered active to a broker ends only by that
/// broker's release, its lease's expiry or its worker's deregistration, never by the grain's own
/// clean-up of a call it took for abandoned.
/// </summary>
public sealed class HeldMeansHeldTests
{
    [Fact]
    public async Task CallerGivesUpInTheStore_RetryArrivesWhileTheBatchIsThere_TheRetryHoldsWhatItIsAnswered()
    {
        // Issue 20, hypothesis 1: the retry joined a later batch, read the key's allocation as
        // existing and was answered active; then the grain's release for the "gone" caller ended it.
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var firstBatch = await GiveUpInTheStoreAsync(h, "broker-session");

        var retry = h.Pool.AllocateAsync(new AllocationRequest("broker-session"), TimeSpan.Zero);
        var retryBatch = await Wait.ForAsync(h.Store.BlockedAllocate(1), "the retry's batch to reach the store");
        firstBatch.Release();
        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).AllocationBatchesInFlight == 1, "the first batch to return");
        retryBatch.Release();
        var answer = await Wait.ForAsync(retry, "the retry");
        await SettleAsync(h);

        await AssertHeldAsync(h, answer);
    }

    [Fact]
    public async Task CallerGivesUpInTheStore_RetryArrivesWhileTheGrainReleasesIt_TheRetryIsNotAnsweredActive()
    {
        await using var h = await GrainHarness.CreateAsync();
        h.Store.BlockAllocations = true;
        h.Store.BlockReleases = true;
        var firstBatch = await GiveUpInTheStoreAsync(h, "broker-session");
        firstBatch.Release();
        var release = await Wait.ForAsync(h.Store.BlockedRelease(0), "the grain's release of the abandoned allocation to reach the store");

        h.Store.BlockAllocations = false;
        var retry = h.Pool.AllocateAsync(new AllocationRequest("broker-session"), TimeSpan.Zero);
        await Wait.UntilAsync(async () => retry.IsCompleted || h.Store.AllocateBatches.Count == 2 || await h.QueuedAsync() == 1, "the retry to reach the store or be held back");
        release.Release();
        h.Store.BlockReleases = false;
        var answer = await Wait.ForAsync(retry, "the retry");
        await SettleAsync(h);

        if (answer.Allocation is { IsActive: true })
        {
            await AssertHeldAsync(h, answer);
        }
        else
        {
            answer.Status.Should().Be(AllocationStatus.Existing, "the key's allocation has ended: its outcome is answered, never a second allocation");
        }
    }

    /// <summary>One call whose batch is blocked in the store, then canceled: answered outcome unknown.</summary>
    internal static async Task<RecordingStore.BlockedCall> GiveUpInTheStoreAsync(GrainHarness h, string key)
    {
        using var cts = new CancellationTokenSource();
        var call = h.Pool.AllocateAsync(new AllocationRequest(key), TimeSpan.Zero, cts.Token);
        var batch = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch to reach the store");
        await cts.CancelAsync();
        var gaveUp = () => Wait.ForAsync(call, "the first call to be answered");
        (await gaveUp.Should().ThrowAsync<AllocatorException>()).Which.OutcomeUnknown.Should().BeTrue();
        return batch;
    }

    internal static async Task SettleAsync(GrainHarness h)
    {
        h.Store.BlockReleases = false;
        for (var i = 0; h.Store.BlockedRelease(i).IsCompleted; i++)
        {
            (await h.Store.BlockedRelease(i)).Release();
        }

        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()) is { AllocationBatchesInFlight: 0, ReleaseBatchesInFlight: 0, QueuedReleases: 0 }, "the grain to settle");
    }

    private static async Task AssertHeldAsync(GrainHarness h, AllocationOutcome answer)
    {
        answer.Allocation.Should().NotBeNull();
        answer.Allocation!.IsActive.Should().BeTrue("the retry was answered with an active allocation");
        var held = await h.Store.GetAllocationAsync(GrainHarness.PoolId, answer.Allocation.AllocationId);
        held!.IsActive.Should().BeTrue("an allocation answered active ends only by its broker's release, its lease or its worker's deregistration");
        (await h.Pool.ReleaseAsync(answer.Allocation.AllocationId, answer.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok, "the broker releases what it was given");
    }

    [Fact]
    public async Task PoolSettingsUnreadable_AllocationTakesThePoolsDefaultLease_NotTheFallback()
    {
        // Issue 20, hypothesis 2: while the grain does not know the pool's settings (a failed read,
        // or a change being re-read), every allocation was given the 24-hour fallback lease.
        await using var h = await GrainHarness.CreateAsync(settings: new PoolSettings { DefaultLease = TimeSpan.FromSeconds(60) });
        h.Store.FailPoolReads = true;
        var now = h.Time.GetUtcNow();

        var outcome = await h.Pool.AllocateAsync(new AllocationRequest("s"), TimeSpan.Zero);

        outcome.Allocation!.ExpiresAt.Should().Be(now + TimeSpan.FromSeconds(60), "the pool's default lease is the store's to apply, known or not to the grain");
    }

    [Fact]
    public async Task PoolSettingsChanging_AllocationsWhileTheyAreReRead_TakeThePoolsDefaultLease()
    {
        await using var h = await GrainHarness.CreateAsync(settings: new PoolSettings { DefaultLease = TimeSpan.FromSeconds(60) });
        await h.Pool.AllocateAsync(new AllocationRequest("before"), TimeSpan.Zero); // the settings are known now
        h.Store.BlockPoolReads = true;
        await h.Store.UpsertPoolAsync(GrainHarness.PoolId, new PoolSettings { DefaultLease = TimeSpan.FromSeconds(61) });
        await h.Pool.OnSettingsChangedAsync();
        var now = h.Time.GetUtcNow();

        var outcome = await h.Pool.AllocateAsync(new AllocationRequest("during"), TimeSpan.Zero);

        outcome.Allocation!.ExpiresAt.Should().Be(now + TimeSpan.FromSeconds(61), "the store applies the pool's current default lease");
        h.Store.BlockPoolReads = false;
    }
}
