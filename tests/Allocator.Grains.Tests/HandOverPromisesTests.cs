using Allocator.Grains.Tests.Support;

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
    public async Task SiloStop_AbandonedReleaseStillQueued_IsStillCarriedOut()
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

        await Wait.UntilAsync(async () => (await h.Pool.GetStatusAsync()).QueuedReleases == 1, "the abandoned allocation's release to queue behind the broker's");

        // The silo stops (no other silo to take the grain) while that release is still queued.
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

    /// <summary>Lets every release batch that was blocked in the store (before the block was lifted) go on, until <paramref name="done"/>.</summary>
    private static async Task UnblockReleasesUntilAsync(GrainHarness h, Task done)
    {
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        for (var i = 1; !done.IsCompleted && !limit.IsCancellationRequested;)
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
