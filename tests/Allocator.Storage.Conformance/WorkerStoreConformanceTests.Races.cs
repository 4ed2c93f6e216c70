namespace Allocator.Storage.Conformance;

/// <summary>Lifecycle operations racing one another: every allocation ends exactly once, loads stay exact.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Release_SameAllocationConcurrently_FreesItOnce()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 4);
        var kept = await AllocateAsync(poolId);
        var allocation = await AllocateAsync(poolId, units: 2);

        var results = await RunTogetherAsync(16, _ => Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch));

        results.Count(r => r.Status == LeaseStatus.Ok).Should().Be(1, "an allocation ends once");
        results.Count(r => r.Status == LeaseStatus.NotActive).Should().Be(15);
        await AssertLoadsMatchAsync(poolId, [kept]);
    }

    [Fact]
    public async Task RenewAndRelease_SameEpochConcurrently_ExactlyOneSucceeds()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 10);
        var allocations = new List<Allocation>();
        for (var i = 0; i < 16; i++)
        {
            allocations.Add(await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(1)));
        }

        // Caller 2k renews allocation k and caller 2k+1 releases it, both with the same epoch.
        var results = await RunTogetherAsync(32, i =>
        {
            var allocation = allocations[i / 2];
            return i % 2 == 0
                ? Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(5))
                : Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch);
        });

        var stillActive = new List<Allocation>();
        for (var k = 0; k < allocations.Count; k++)
        {
            var renew = results[2 * k];
            var release = results[(2 * k) + 1];
            new[] { renew.Status, release.Status }.Count(s => s == LeaseStatus.Ok).Should().Be(1, "one epoch admits one of the two operations on allocation {0}", k);
            if (renew.Status == LeaseStatus.Ok)
            {
                release.Status.Should().Be(LeaseStatus.StaleEpoch, "the renew advanced the epoch first");
                stillActive.Add(renew.Allocation!);
            }
            else
            {
                renew.Status.Should().Be(LeaseStatus.NotActive, "the release ended the allocation first");
            }
        }

        await AssertLoadsMatchAsync(poolId, stillActive);
    }

    [Fact]
    public async Task ReapExpired_RacingReleases_EachAllocationEndsOnce()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 10);
        var allocations = new List<Allocation>();
        for (var i = 0; i < 20; i++)
        {
            var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromHours(1));
            await ExpireLeaseAsync(poolId, allocation.AllocationId);
            allocations.Add(allocation);
        }

        // Two reapers race twenty releases of the very allocations they reap (expired, so the
        // releases answer 'not active').
        var results = await RunTogetherAsync(22, async i =>
        {
            if (i < 2)
            {
                var reaped = await Store.ReapExpiredAsync(maxCount: 100);
                return reaped.Where(a => a.PoolId == poolId).Select(a => a.AllocationId).ToList();
            }

            var allocation = allocations[i - 2];
            var release = await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch);
            release.Status.Should().Be(LeaseStatus.NotActive, "an expired lease is over, reaped or not (issue 20, #5)");
            return new List<Guid>();
        });

        // Each ended once, at its expiry: by a reaper, or by the release that held its row (and
        // ended it as a reaper would); never twice, and its units freed once.
        results.SelectMany(ids => ids).Should().OnlyHaveUniqueItems();
        foreach (var allocation in allocations)
        {
            var ended = (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!;
            ended.EndedAt.Should().Be(ended.ExpiresAt);
        }

        (await Store.ReapExpiredAsync(maxCount: 100)).Where(a => a.PoolId == poolId).Should().BeEmpty("nothing was left for a later reap");
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task Deregister_RacingAllocations_NothingLandsOnTheRemovedWorker()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 16);

        var results = await RunTogetherAsync(33, async i =>
        {
            if (i == 0)
            {
                (await Store.DeregisterWorkerAsync(poolId, WorkerId(0))).Found.Should().BeTrue();
                return null;
            }

            return (await AllocateOneAsync(poolId, Request())).Allocation;
        });

        var allocated = results.Where(a => a is not null).Select(a => a!).ToList();
        allocated.Should().HaveCount(32, "48 slots remain even without the removed worker");
        var active = new List<Allocation>();
        foreach (var allocation in allocated)
        {
            var current = await Store.GetAllocationAsync(poolId, allocation.AllocationId);
            current.Should().NotBeNull();
            if (current!.IsActive)
            {
                active.Add(current);
            }
            else
            {
                allocation.WorkerId.Should().Be(WorkerId(0), "only the deregistered worker's allocations were ended");
            }
        }

        active.Should().NotContain(a => a.WorkerId == WorkerId(0), "a deregistered worker keeps no active allocation");
        (await Store.GetWorkerAsync(poolId, WorkerId(0))).Should().BeNull();
        await AssertLoadsMatchAsync(poolId, active);
    }

    [Fact]
    public async Task Register_ConcurrentOverlappingBatches_AllAppliedWithoutDeadlock()
    {
        var poolId = await CreatePoolAsync();
        var ids = Enumerable.Range(0, 20).Select(WorkerId).ToList();

        // Each caller registers the same workers in a different order; stores lock rows in one order.
        var outcomes = await RunTogetherAsync(8, i =>
        {
            var order = i % 2 == 0 ? ids.AsEnumerable().Reverse() : ids.Skip(i).Concat(ids.Take(i));
            return Store.RegisterWorkersAsync(poolId, [.. order.Select(id => Registration(id, 5))]);
        });

        outcomes.SelectMany(o => o).Count(o => o.Status == RegistrationStatus.Created).Should().Be(20, "each worker is created once");
        outcomes.SelectMany(o => o).Count(o => o.Status == RegistrationStatus.Updated).Should().Be(140);
        var workers = await Store.GetWorkersAsync(poolId);
        workers.Select(w => w.WorkerId).Should().Equal(ids);
        workers.Should().OnlyContain(w => w.Epoch == 8, "eight registrations give epoch 8");
    }

    [Fact]
    public async Task AllocateBatch_RowLockedOnOneWorker_SpreadsOverTheOthersWithoutWaiting()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 10);

        var rowLock = await HoldRowLockAsync(poolId, WorkerId(0));
        try
        {
            var outcomes = await WithinAsync(
                Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 8).Select(_ => Request())]),
                NoWaitBound,
                $"a batch to skip the locked row of {WorkerId(0)} while the lock is still held");

            outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
            outcomes.Should().OnlyContain(o => o.Allocation!.WorkerId != WorkerId(0));
        }
        finally
        {
            await rowLock.DisposeAsync();
        }

        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { [WorkerId(0)] = 0, [WorkerId(1)] = 4, [WorkerId(2)] = 4 });
    }
}
