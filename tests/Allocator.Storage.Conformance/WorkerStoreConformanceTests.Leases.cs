namespace Allocator.Storage.Conformance;

/// <summary>Release, renew, fencing epochs and lease expiry.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Release_CurrentEpoch_FreesTheSlot()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var kept = await AllocateAsync(poolId);
        var released = await AllocateAsync(poolId);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);

        var result = await Store.ReleaseAsync(poolId, released.AllocationId, released.Epoch);

        result.Status.Should().Be(LeaseStatus.Ok);
        result.Allocation!.IsActive.Should().BeFalse();
        (await Store.GetAllocationAsync(poolId, released.AllocationId))!.IsActive.Should().BeFalse();
        await AssertLoadsMatchAsync(poolId, [kept]);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.Allocated, "the released slot is free again");
    }

    /// <summary>
    /// A caller whose release may have run without its answer (its silo left meanwhile) reads the
    /// allocation to tell whether a release ended it (<see cref="Allocation.EndReason"/>).
    /// </summary>
    [Fact]
    public async Task GetAllocation_OfAnEndedAllocation_SaysHowItEnded()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 10);
        var active = await AllocateAsync(poolId);
        var released = await AllocateAsync(poolId);
        var lapsed = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        var reaped = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        var releasedAfterItLapsed = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        var leftWithItsWorker = await CreatePoolWithWorkersAsync(workers: 1, capacity: 10);
        var deregistered = await AllocateAsync(leftWithItsWorker);

        (await Store.ReleaseAsync(poolId, released.AllocationId, released.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        await ExpireLeaseAsync(poolId, lapsed.AllocationId);
        await ExpireLeaseAsync(poolId, reaped.AllocationId);
        (await Store.ReapExpiredAsync(1000)).Select(a => a.AllocationId).Should().Contain(reaped.AllocationId);
        await ExpireLeaseAsync(poolId, releasedAfterItLapsed.AllocationId);
        (await Store.ReleaseAsync(poolId, releasedAfterItLapsed.AllocationId, releasedAfterItLapsed.Epoch)).Status.Should().Be(LeaseStatus.NotActive);
        (await Store.DeregisterWorkerAsync(leftWithItsWorker, deregistered.WorkerId)).Found.Should().BeTrue();

        async Task<AllocationEndReason?> ReasonAsync(string pool, Allocation allocation) =>
            (await Store.GetAllocationAsync(pool, allocation.AllocationId))!.EndReason;
        (await ReasonAsync(poolId, active)).Should().BeNull("it has not ended");
        (await ReasonAsync(poolId, released)).Should().Be(AllocationEndReason.Released);
        (await ReasonAsync(poolId, lapsed)).Should().Be(AllocationEndReason.Expired, "a lease is over at its expiry, reaped or not");
        (await ReasonAsync(poolId, reaped)).Should().Be(AllocationEndReason.Expired);
        (await ReasonAsync(poolId, releasedAfterItLapsed)).Should().Be(AllocationEndReason.Expired, "the lease had ended before the release came");
        (await ReasonAsync(leftWithItsWorker, deregistered)).Should().Be(AllocationEndReason.WorkerDeregistered);
    }

    [Fact]
    public async Task Release_Twice_SecondReturnsNotActive()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId, units: 2);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var second = await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch);

        second.Status.Should().Be(LeaseStatus.NotActive);
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task ReleaseAndRenew_UnknownAllocation_ReturnNotFound()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var other = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(other);

        (await Store.ReleaseAsync(poolId, Guid.NewGuid(), 1)).Status.Should().Be(LeaseStatus.NotFound);
        (await Store.RenewAsync(poolId, Guid.NewGuid(), 1, TimeSpan.FromMinutes(1))).Status.Should().Be(LeaseStatus.NotFound);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.NotFound, "the allocation belongs to another pool");
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId)).Should().BeNull();
        await AssertLoadsMatchAsync(other, [allocation]);
    }

    [Fact]
    public async Task Renew_CurrentEpoch_AdvancesEpochAndExtendsExpiry()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(1));
        allocation.ExpiresAt.Should().NotBeNull();

        var result = await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, TimeSpan.FromHours(1));

        result.Status.Should().Be(LeaseStatus.Ok);
        var renewed = result.Allocation!;
        renewed.Epoch.Should().BeGreaterThan(allocation.Epoch, "every renew advances the fencing epoch");
        renewed.ExpiresAt.Should().BeAfter(allocation.ExpiresAt!.Value.AddMinutes(30), "the lease now runs an hour from the renewal");
        renewed.IsActive.Should().BeTrue();
        renewed.WorkerId.Should().Be(allocation.WorkerId);
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId)).Should().BeEquivalentTo(renewed);
        await AssertLoadsMatchAsync(poolId, [renewed]);
    }

    [Fact]
    public async Task Renew_WithoutLease_TakesThePoolDefault()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2, new PoolSettings { DefaultLease = TimeSpan.FromHours(2) });
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(1));

        var renewed = (await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, lease: null)).Allocation!;

        renewed.ExpiresAt.Should().BeAfter(allocation.ExpiresAt!.Value.AddMinutes(90), "the pool's default lease is two hours");
    }

    [Fact]
    public async Task Allocate_Lease_ExpiryFollowsRequestOrPoolDefault()
    {
        var noDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var withDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(10) });

        (await AllocateAsync(noDefault)).ExpiresAt.Should().BeNull("neither the request nor the pool names a lease");
        var requested = await AllocateAsync(noDefault, lease: TimeSpan.FromMinutes(3));
        requested.ExpiresAt.Should().BeCloseTo(requested.CreatedAt.AddMinutes(3), TimeSpan.FromSeconds(5));
        var defaulted = await AllocateAsync(withDefault);
        defaulted.ExpiresAt.Should().BeCloseTo(defaulted.CreatedAt.AddMinutes(10), TimeSpan.FromSeconds(5));
    }

    [Fact]
    public async Task ReleaseAndRenew_StaleEpoch_ReturnStaleEpochAndChangeNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var original = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(1));
        var renewed = (await Store.RenewAsync(poolId, original.AllocationId, original.Epoch, TimeSpan.FromMinutes(10))).Allocation!;
        var before = await SnapshotAsync(poolId);

        var release = await Store.ReleaseAsync(poolId, original.AllocationId, original.Epoch);
        var renew = await Store.RenewAsync(poolId, original.AllocationId, original.Epoch, TimeSpan.FromDays(1));

        release.Status.Should().Be(LeaseStatus.StaleEpoch, "the holder of the old epoch has been superseded");
        renew.Status.Should().Be(LeaseStatus.StaleEpoch);
        (await Store.GetAllocationAsync(poolId, original.AllocationId)).Should().BeEquivalentTo(renewed, "a stale epoch changes nothing");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
        (await Store.ReleaseAsync(poolId, renewed.AllocationId, renewed.Epoch)).Status.Should().Be(LeaseStatus.Ok, "the current epoch still works");
    }

    [Fact]
    public async Task ReapExpired_TwoConcurrentReapers_FreeEachExpiredAllocationOnce()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 5);
        var allocations = new List<Allocation>();
        for (var i = 0; i < 12; i++)
        {
            allocations.Add(await AllocateAsync(poolId, units: i % 3 == 0 ? 2 : 1, lease: TimeSpan.FromHours(1)));
        }

        var expired = allocations.Where((_, i) => i % 2 == 0).ToList();
        var live = allocations.Where((_, i) => i % 2 == 1).ToList();
        foreach (var allocation in expired)
        {
            await ExpireLeaseAsync(poolId, allocation.AllocationId);
        }

        var reaped = await RunTogetherAsync(2, _ => Store.ReapExpiredAsync(maxCount: 100));

        var ours = reaped.SelectMany(r => r).Where(a => a.PoolId == poolId).ToList();
        ours.Select(a => a.AllocationId).Should().BeEquivalentTo(expired.Select(a => a.AllocationId), "each expired allocation is reaped exactly once");
        ours.Should().OnlyContain(a => !a.IsActive);
        await AssertLoadsMatchAsync(poolId, live);
        foreach (var allocation in expired)
        {
            (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.NotActive, "an expired allocation has ended");
        }

        (await Store.ReapExpiredAsync(maxCount: 100)).Where(a => a.PoolId == poolId).Should().BeEmpty("nothing is left to reap");
        await AssertLoadsMatchAsync(poolId, live);
    }

    [Fact]
    public async Task ReapExpired_UnexpiredLeases_LeftAlone()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5);
        var leased = await AllocateAsync(poolId, lease: TimeSpan.FromHours(1));
        var unleased = await AllocateAsync(poolId);

        var reaped = await Store.ReapExpiredAsync(maxCount: 100);

        reaped.Where(a => a.PoolId == poolId).Should().BeEmpty();
        await AssertLoadsMatchAsync(poolId, [leased, unleased]);
    }

    [Fact]
    public async Task ReapExpired_MaxCount_EndsNoMoreThanAsked()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5);
        var allocations = new List<Allocation>();
        for (var i = 0; i < 5; i++)
        {
            var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromHours(1));
            await ExpireLeaseAsync(poolId, allocation.AllocationId);
            allocations.Add(allocation);
        }

        var first = await Store.ReapExpiredAsync(maxCount: 3);
        first.Should().HaveCount(3);
        var rest = await Store.ReapExpiredAsync(maxCount: 100);

        first.Concat(rest).Where(a => a.PoolId == poolId).Select(a => a.AllocationId)
            .Should().BeEquivalentTo(allocations.Select(a => a.AllocationId));
        await AssertLoadsMatchAsync(poolId, []);
    }
}
