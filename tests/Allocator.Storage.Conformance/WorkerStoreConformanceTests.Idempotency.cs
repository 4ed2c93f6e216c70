namespace Allocator.Storage.Conformance;

/// <summary>
/// One allocation per session key per pool, under any concurrency; after it ended, the same key
/// answers the ended allocation for the store's history retention (default 24 h).
/// </summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_50ConcurrentRequestsWithOneSessionKey_GiveOneAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 100);
        var key = NewSessionKey();

        var outcomes = await RunTogetherAsync(50, _ => AllocateOneAsync(poolId, Request(units: 3, sessionKey: key)));

        outcomes.Should().OnlyContain(o => o.Allocation != null, "every caller gets the session's allocation back");
        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(1, "a session key gets exactly one allocation");
        outcomes.Count(o => o.Status == AllocationStatus.Existing).Should().Be(49);
        outcomes.Select(o => o.Allocation!.AllocationId).Distinct().Should().ContainSingle("all outcomes carry the same allocation");
        outcomes.Select(o => o.Allocation!.WorkerId).Distinct().Should().ContainSingle();

        var allocation = outcomes.Single(o => o.Status == AllocationStatus.Allocated).Allocation!;
        await AssertLoadsMatchAsync(poolId, [allocation]);
        (await Store.GetPoolStatisticsAsync(poolId)).Load.Should().Be(3, "the units are taken once");
    }

    [Fact]
    public async Task Allocate_RetryAfterSuccess_ReturnsExistingUnchanged()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId, units: 2, lease: TimeSpan.FromMinutes(5));

        var retry = await AllocateOneAsync(poolId, Request(units: 2, lease: TimeSpan.FromMinutes(5), sessionKey: first.SessionKey));

        retry.Status.Should().Be(AllocationStatus.Existing);
        retry.Allocation.Should().BeEquivalentTo(first, "a retry returns the same allocation unchanged");
        await AssertLoadsMatchAsync(poolId, [first]);
    }

    [Fact]
    public async Task Allocate_RetryWithDifferentUnits_StillReturnsTheExistingAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId, units: 1);

        var retry = await AllocateOneAsync(poolId, Request(units: 4, sessionKey: first.SessionKey));

        retry.Status.Should().Be(AllocationStatus.Existing);
        retry.Allocation!.AllocationId.Should().Be(first.AllocationId);
        retry.Allocation.Units.Should().Be(1);
        await AssertLoadsMatchAsync(poolId, [first]);
    }

    [Fact]
    public async Task Allocate_SessionKeyAfterRelease_AnswersTheEndedAllocation_AndAllocatesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, first.AllocationId, first.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var replay = await AllocateOneAsync(poolId, Request(sessionKey: first.SessionKey));

        replay.Status.Should().Be(AllocationStatus.Existing, "a key's outcome is kept for the retention window, also after release");
        replay.Allocation!.AllocationId.Should().Be(first.AllocationId);
        replay.Allocation.IsActive.Should().BeFalse();
        replay.Allocation.EndedAt.Should().NotBeNull();
        await AssertLoadsMatchAsync(poolId, []);
        (await Store.GetPoolStatisticsAsync(poolId)).ActiveAllocations.Should().Be(0);
    }

    [Fact]
    public async Task Allocate_SessionKeysAfterExpiryAndDeregistration_AnswerTheEndedAllocations()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var expiring = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, expiring.AllocationId);
        (await Store.ReapExpiredAsync(1000)).Select(a => a.AllocationId).Should().Contain(expiring.AllocationId);
        var onRemovedWorker = await AllocateAsync(poolId);
        (await Store.DeregisterWorkerAsync(poolId, onRemovedWorker.WorkerId)).Found.Should().BeTrue();

        var replays = await Store.AllocateAsync(poolId, [Request(sessionKey: expiring.SessionKey), Request(sessionKey: onRemovedWorker.SessionKey)]);

        replays.Should().OnlyContain(o => o.Status == AllocationStatus.Existing && o.Allocation!.EndedAt != null);
        replays.Select(o => o.Allocation!.AllocationId).Should().Equal(expiring.AllocationId, onRemovedWorker.AllocationId);
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task Allocate_AlikeBatchMixingEndedAndNewKeys_AllocatesOnlyTheNewOnes()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 10);
        var ended = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, ended.AllocationId, ended.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        // Alike requests (same units, no tags, distinct keys): what a pool grain batch looks like.
        var outcomes = await Store.AllocateAsync(poolId, [Request(), Request(sessionKey: ended.SessionKey), Request(), Request()]);

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Existing, AllocationStatus.Allocated, AllocationStatus.Allocated);
        outcomes[1].Allocation!.AllocationId.Should().Be(ended.AllocationId);
        outcomes[1].Allocation!.IsActive.Should().BeFalse();
        await AssertLoadsMatchAsync(poolId, [outcomes[0].Allocation!, outcomes[2].Allocation!, outcomes[3].Allocation!]);
    }

    [Fact]
    public async Task EndedAllocation_ReadsAsEnded_AndASecondReleaseOrARenewAnswersNotActive()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 10);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var read = await Store.GetAllocationAsync(poolId, allocation.AllocationId);
        var again = await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch);
        var inBatch = await Store.ReleaseAsync(poolId, [new LeaseRelease(allocation.AllocationId, allocation.Epoch)]);
        var renew = await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(1));

        read!.EndedAt.Should().NotBeNull();
        read.AllocationId.Should().Be(allocation.AllocationId);
        again.Status.Should().Be(LeaseStatus.NotActive);
        again.Allocation!.EndedAt.Should().NotBeNull();
        inBatch.Single().Status.Should().Be(LeaseStatus.NotActive);
        renew.Status.Should().Be(LeaseStatus.NotActive);
        (await Store.ReleaseAsync(poolId, Guid.NewGuid(), 1)).Status.Should().Be(LeaseStatus.NotFound);
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task Allocate_ReplaysRacingTheRelease_NeverAllocateTheKeyTwice()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 100);
        for (var round = 0; round < 5; round++)
        {
            var first = await AllocateAsync(poolId);

            // One release and 20 replays of the key (singles and alike batches) start together.
            var outcomes = await RunTogetherAsync(21, async i =>
            {
                if (i == 0)
                {
                    (await Store.ReleaseAsync(poolId, first.AllocationId, first.Epoch)).Status.Should().Be(LeaseStatus.Ok);
                    return null;
                }

                return i % 2 == 0
                    ? await AllocateOneAsync(poolId, Request(sessionKey: first.SessionKey))
                    : (await Store.AllocateAsync(poolId, [Request(sessionKey: first.SessionKey), Request()]))[0];
            });

            outcomes.Where(o => o is not null).Should().OnlyContain(
                o => o!.Status == AllocationStatus.Existing && o.Allocation!.AllocationId == first.AllocationId,
                "before or after the release, the key's one allocation is the answer");
            var stats = await Store.GetPoolStatisticsAsync(poolId);
            stats.ActiveAllocations.Should().Be(stats.Load, "only the extra requests of the batches are active, one unit each");
        }
    }

    [Fact]
    public async Task Allocate_SameSessionKeyInTwoPools_IndependentAllocations()
    {
        var poolA = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var poolB = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var key = NewSessionKey();

        var inA = await AllocateAsync(poolA, sessionKey: key);
        var inB = await AllocateAsync(poolB, sessionKey: key);

        inB.AllocationId.Should().NotBe(inA.AllocationId, "idempotency is per pool");
        await AssertLoadsMatchAsync(poolA, [inA]);
        await AssertLoadsMatchAsync(poolB, [inB]);
    }
}
