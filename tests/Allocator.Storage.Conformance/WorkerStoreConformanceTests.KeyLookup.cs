namespace Allocator.Storage.Conformance;

/// <summary>
/// ADR 0036: a request naming several pools asks each what its session key holds there before it
/// allocates anywhere. The answer must be the one an allocate with the key would give: the active
/// allocation, else the latest that ended within the retention, else nothing; per owner.
/// </summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task GetAllocationByKey_AKeyNeverUsed_IsNull_AndTakesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);

        (await Store.GetAllocationByKeyAsync(poolId, NewSessionKey(), owner: null)).Should().BeNull();
        (await Store.GetAllocationByKeyAsync(poolId, NewSessionKey(), owner: "farm-a")).Should().BeNull();
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task GetAllocationByKey_AnActiveAllocation_IsTheOneAnAllocateWouldAnswer()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var made = (await AllocateOneAsync(poolId, Request(units: 2, lease: TimeSpan.FromMinutes(5)) with { Owner = "farm-a" })).Allocation!;

        var found = await Store.GetAllocationByKeyAsync(poolId, made.SessionKey, owner: "farm-a");
        var replay = await AllocateOneAsync(poolId, Request(units: 2, sessionKey: made.SessionKey) with { Owner = "farm-a" });

        found.Should().NotBeNull();
        found!.AllocationId.Should().Be(made.AllocationId);
        found.WorkerId.Should().Be(made.WorkerId);
        found.Units.Should().Be(2);
        found.Epoch.Should().Be(made.Epoch);
        found.Owner.Should().Be("farm-a");
        found.SessionKey.Should().Be(made.SessionKey, "the caller's key, without its owner");
        found.IsActive.Should().BeTrue();
        found.EndReason.Should().BeNull();
        replay.Allocation!.AllocationId.Should().Be(found.AllocationId);
    }

    [Fact]
    public async Task GetAllocationByKey_AnotherOwnersKey_IsNotSeen()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 4);
        var key = NewSessionKey();
        var mine = (await AllocateOneAsync(poolId, Request(sessionKey: key) with { Owner = "farm-a" })).Allocation!;

        (await Store.GetAllocationByKeyAsync(poolId, key, owner: "farm-b")).Should().BeNull("farm-b's key is its own");
        (await Store.GetAllocationByKeyAsync(poolId, key, owner: null)).Should().BeNull("a key without an owner is another key");
        (await Store.GetAllocationByKeyAsync(poolId, key, owner: "farm-a"))!.AllocationId.Should().Be(mine.AllocationId);
    }

    [Fact]
    public async Task GetAllocationByKey_AfterRelease_IsTheEndedAllocation_WithHowItEnded()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 4);
        var made = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, made.AllocationId, made.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var found = await Store.GetAllocationByKeyAsync(poolId, made.SessionKey, owner: null);

        found.Should().NotBeNull("an allocate with the key answers the ended allocation for the retention");
        found!.AllocationId.Should().Be(made.AllocationId);
        found.IsActive.Should().BeFalse();
        found.EndedAt.Should().NotBeNull();
        found.EndReason.Should().Be(AllocationEndReason.Released);
    }

    [Fact]
    public async Task GetAllocationByKey_AnExpiredLeaseNotYetReaped_IsOverAtItsExpiry()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 4);
        var made = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, made.AllocationId);

        var found = await Store.GetAllocationByKeyAsync(poolId, made.SessionKey, owner: null);

        found!.AllocationId.Should().Be(made.AllocationId);
        found.IsActive.Should().BeFalse("an expired lease holds nothing, reaped or not");
        found.EndReason.Should().Be(AllocationEndReason.Expired);
    }

    [Fact]
    public async Task GetAllocationByKey_AMissingPool_IsNotFound()
    {
        var act = () => Store.GetAllocationByKeyAsync($"missing-{Guid.NewGuid():N}", NewSessionKey(), owner: null);

        (await act.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
    }
}
