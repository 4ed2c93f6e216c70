using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

/// <summary>Two silos in one cluster, sharing one store as two service instances share a database.</summary>
public sealed class ClusterTests
{
    private static readonly PoolSettings Waiting = new() { MaxWait = TimeSpan.FromMinutes(1) };

    [Fact]
    public async Task PoolGrain_CalledThroughBothSilos_IsOneActivation()
    {
        await using var h = await GrainHarness.CreateAsync(silos: 2, options: new GrainOptions { MaxBatchesInFlight = 1, AdaptiveBatchesInFlight = false });
        h.Store.BlockAllocations = true;

        var first = h.GrainsOf(0).GetPoolGrain(GrainHarness.PoolId).AllocateAsync(new AllocationRequest("a"), TimeSpan.Zero);
        var blocked = await Wait.ForAsync(h.Store.BlockedAllocate(0), "the first batch");
        var throughA = h.GrainsOf(0).GetPoolGrain(GrainHarness.PoolId).AllocateAsync(new AllocationRequest("b"), TimeSpan.Zero);
        var throughB = h.GrainsOf(1).GetPoolGrain(GrainHarness.PoolId).AllocateAsync(new AllocationRequest("c"), TimeSpan.Zero);

        // Both callers queue in the same activation behind the one batch in flight, and go together.
        await Wait.UntilAsync(async () => await h.QueuedAsync() == 2, "the calls through both silos to queue in one grain");
        blocked.Release();
        (await Wait.ForAsync(h.Store.BlockedAllocate(1), "the second batch")).Release();
        await Wait.ForAsync(Task.WhenAll(first, throughA, throughB), "all three callers");

        h.Store.AllocateBatches.Should().Equal(1, 2);
        h.Store.Subscriptions.Should().Be(1, "one activation in the whole cluster");
    }

    [Fact]
    public async Task Waiter_ParkedThroughSiloA_IsWokenByAReleaseThroughSiloB_WithoutStoreNotifications()
    {
        await using var h = await GrainHarness.CreateAsync(workers: 1, capacity: 1, settings: Waiting, silos: 2);
        h.Store.SuppressNotifications = true;
        var viaA = h.GrainsOf(0).GetPoolGrain(GrainHarness.PoolId);
        var viaB = h.GrainsOf(1).GetPoolGrain(GrainHarness.PoolId);
        var holder = (await viaB.AllocateAsync(new AllocationRequest("holder"), TimeSpan.Zero)).Allocation!;
        var waiter = viaA.AllocateAsync(new AllocationRequest("waiter"), TimeSpan.FromSeconds(30));
        await Wait.UntilAsync(async () => await h.WaitersAsync() == 1, "the caller to be parked");

        (await viaB.ReleaseAsync(holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        // The re-check timer does not fire (the clock is fake and does not move): only the
        // release through the grain can have woken the waiter.
        (await Wait.ForAsync(waiter, "the release through B to wake the waiter parked through A")).Status.Should().Be(AllocationStatus.Allocated);
    }

    [Fact]
    public async Task AllocatorException_CrossingSilos_KeepsItsKind()
    {
        await using var h = await GrainHarness.CreateAsync(silos: 2);

        // Activate the grain of a missing pool on one silo, then call it through the other, so
        // that the store's NotFound crosses the network on the way back.
        List<AllocatorException> errors = [];
        for (var silo = 0; silo < 2; silo++)
        {
            var call = () => h.GrainsOf(silo).GetPoolGrain("missing").AllocateAsync(new AllocationRequest("s"), TimeSpan.Zero);
            errors.Add((await call.Should().ThrowAsync<AllocatorException>()).Which);
        }

        errors.Should().OnlyContain(e => e.Kind == AllocatorErrorKind.NotFound && e.Message.Contains("missing", StringComparison.Ordinal));
    }
}
