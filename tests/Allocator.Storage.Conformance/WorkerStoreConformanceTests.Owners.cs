namespace Allocator.Storage.Conformance;

/// <summary>Issue 22: an allocation and its idempotency key belong to the principal that made it.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_TheSameKeyForAnotherOwner_IsAnotherKey()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5);
        var key = NewSessionKey();

        var a = await AllocateOneAsync(poolId, Request(sessionKey: key) with { Owner = "farm-a" });
        var b = await AllocateOneAsync(poolId, Request(sessionKey: key) with { Owner = "farm-b" });
        var again = await AllocateOneAsync(poolId, Request(sessionKey: key) with { Owner = "farm-a" });

        a.Status.Should().Be(AllocationStatus.Allocated);
        b.Status.Should().Be(AllocationStatus.Allocated, "farm-b's key is its own: farm-a's allocation is never answered to it");
        b.Allocation!.AllocationId.Should().NotBe(a.Allocation!.AllocationId);
        again.Status.Should().Be(AllocationStatus.Existing);
        again.Allocation!.AllocationId.Should().Be(a.Allocation.AllocationId);
        again.Allocation.Owner.Should().Be("farm-a");
        again.Allocation.SessionKey.Should().Be(key, "the caller's key, without its owner");
        (await Store.GetAllocationAsync(poolId, b.Allocation.AllocationId))!.Owner.Should().Be("farm-b");
        await AssertLoadsMatchAsync(poolId, [a.Allocation, b.Allocation]);
    }

    [Fact]
    public async Task ReleaseAndRenew_AnotherOwnersAllocation_AreNotFound_AndChangeNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var mine = (await AllocateOneAsync(poolId, Request(lease: TimeSpan.FromMinutes(5)) with { Owner = "farm-a" })).Allocation!;
        var before = await SnapshotAsync(poolId);

        var release = await Store.ReleaseAsync(poolId, [new LeaseRelease(mine.AllocationId, mine.Epoch) { Owner = "farm-b" }]);
        var renew = await Store.RenewAsync(poolId, mine.AllocationId, mine.Epoch, TimeSpan.FromMinutes(10), owner: "farm-b");

        release.Single().Should().Be(new LeaseResult(LeaseStatus.NotFound, null), "exactly as an allocation that does not exist");
        renew.Should().Be(new LeaseResult(LeaseStatus.NotFound, null));
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
        (await Store.GetAllocationAsync(poolId, mine.AllocationId))!.Epoch.Should().Be(mine.Epoch);

        (await Store.RenewAsync(poolId, mine.AllocationId, mine.Epoch, TimeSpan.FromMinutes(10), owner: "farm-a")).Status.Should().Be(LeaseStatus.Ok);
        var renewed = (await Store.GetAllocationAsync(poolId, mine.AllocationId))!;
        (await Store.ReleaseAsync(poolId, [new LeaseRelease(mine.AllocationId, renewed.Epoch) { Owner = "farm-a" }])).Single().Status.Should().Be(LeaseStatus.Ok);
        (await Store.ReleaseAsync(poolId, [new LeaseRelease(mine.AllocationId, renewed.Epoch) { Owner = "farm-b" }])).Single().Should().Be(new LeaseResult(LeaseStatus.NotFound, null), "ended, it is still not farm-b's to see");
    }

    [Fact]
    public async Task AllocationWithoutOwner_IsAnyones_AndAnOwnersKeyIsNotIt()
    {
        // Allocations made before owners existed: every principal may release them, none finds
        // them by key.
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var legacy = await AllocateAsync(poolId);

        var owned = await AllocateOneAsync(poolId, Request(sessionKey: legacy.SessionKey) with { Owner = "farm-a" });

        owned.Status.Should().Be(AllocationStatus.Allocated);
        legacy.Owner.Should().BeNull();
        (await Store.ReleaseAsync(poolId, [new LeaseRelease(legacy.AllocationId, legacy.Epoch) { Owner = "farm-b" }])).Single().Status.Should().Be(LeaseStatus.Ok);
    }
}
