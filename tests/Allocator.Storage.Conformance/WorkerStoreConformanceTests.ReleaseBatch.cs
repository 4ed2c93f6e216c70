namespace Allocator.Storage.Conformance;

/// <summary>
/// Batched release: one commit for many releases, each answered exactly as the single release
/// would answer it, in request order.
/// </summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task ReleaseBatch_AllCurrent_FreesEveryUnitInOneCall()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 4);
        var allocations = new List<Allocation>();
        for (var i = 0; i < 9; i++)
        {
            allocations.Add(await AllocateAsync(poolId, units: i % 3 == 0 ? 2 : 1));
        }

        var released = allocations.Where((_, i) => i % 3 != 1).ToList();
        var kept = allocations.Except(released).ToList();

        var results = await Store.ReleaseAsync(poolId, [.. released.Select(a => new LeaseRelease(a.AllocationId, a.Epoch))]);

        results.Should().HaveCount(released.Count);
        for (var i = 0; i < released.Count; i++)
        {
            results[i].Status.Should().Be(LeaseStatus.Ok, "release {0} carries the current epoch", i);
            results[i].Allocation!.AllocationId.Should().Be(released[i].AllocationId, "results come in request order");
            results[i].Allocation!.IsActive.Should().BeFalse();
            results[i].Allocation!.WorkerId.Should().Be(released[i].WorkerId);
            results[i].Allocation!.Units.Should().Be(released[i].Units);
            (await Store.GetAllocationAsync(poolId, released[i].AllocationId))!.IsActive.Should().BeFalse();
        }

        await AssertLoadsMatchAsync(poolId, kept);
    }

    [Fact]
    public async Task ReleaseBatch_MixedOutcomes_AnswersEachAsASingleReleaseInRequestOrder()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 10), Registration("w-b", 10), Registration("w-gone", 2, "gone"));
        var onGone = await AllocateAsync(poolId, units: 2, tags: ["gone"]);
        var good = await AllocateAsync(poolId, units: 3);
        var ended = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, ended.AllocationId, ended.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        var stale = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        var current = (await Store.RenewAsync(poolId, stale.AllocationId, stale.Epoch, TimeSpan.FromMinutes(10))).Allocation!;
        new[] { good.WorkerId, stale.WorkerId }.Should().NotContain("w-gone", "w-gone was full");
        (await Store.DeregisterWorkerAsync(poolId, "w-gone")).Found.Should().BeTrue();
        var otherPool = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var foreign = await AllocateAsync(otherPool);
        var unknown = Guid.NewGuid();

        var results = await Store.ReleaseAsync(poolId,
        [
            new LeaseRelease(unknown, 1),
            new LeaseRelease(stale.AllocationId, stale.Epoch),
            new LeaseRelease(ended.AllocationId, ended.Epoch),
            new LeaseRelease(onGone.AllocationId, onGone.Epoch),
            new LeaseRelease(foreign.AllocationId, foreign.Epoch),
            new LeaseRelease(good.AllocationId, good.Epoch),
        ]);

        results.Select(r => r.Status).Should().Equal(
            [LeaseStatus.NotFound, LeaseStatus.StaleEpoch, LeaseStatus.NotActive, LeaseStatus.NotActive, LeaseStatus.NotFound, LeaseStatus.Ok],
            "each item answers as the single release would, in request order");
        results[0].Allocation.Should().BeNull();
        results[1].Allocation!.Epoch.Should().Be(current.Epoch, "a stale release reports the allocation unchanged");
        results[1].Allocation!.IsActive.Should().BeTrue();
        results[2].Allocation!.AllocationId.Should().Be(ended.AllocationId);
        results[3].Allocation!.AllocationId.Should().Be(onGone.AllocationId, "an allocation of a deregistered worker has ended");
        results[4].Allocation.Should().BeNull("the allocation belongs to another pool");
        results[5].Allocation!.IsActive.Should().BeFalse();

        await AssertLoadsMatchAsync(poolId, [current]);
        await AssertLoadsMatchAsync(otherPool, [foreign]);
    }

    [Fact]
    public async Task ReleaseBatch_RepeatedId_FirstCurrentReleaseWinsAndTheRestAreNotActive()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var kept = await AllocateAsync(poolId);
        var allocation = await AllocateAsync(poolId, units: 3);
        var release = new LeaseRelease(allocation.AllocationId, allocation.Epoch);
        var staleFirst = new LeaseRelease(allocation.AllocationId, allocation.Epoch - 1);

        var results = await Store.ReleaseAsync(poolId, [staleFirst, release, release, staleFirst]);

        results.Select(r => r.Status).Should().Equal(
            [LeaseStatus.StaleEpoch, LeaseStatus.Ok, LeaseStatus.NotActive, LeaseStatus.NotActive],
            "the batch acts as the releases one after another: a stale one changes nothing, the first current one ends it");
        results[1].Allocation!.IsActive.Should().BeFalse();
        await AssertLoadsMatchAsync(poolId, [kept]);
        (await GetWorkerAsync(poolId, WorkerId(0))).Load.Should().Be(1, "the units were freed once, not once per repeat");
    }

    [Theory]
    [InlineData(0)]
    [InlineData(AllocatorLimits.MaxBatchSize + 1)]
    public async Task ReleaseBatch_SizeOutOfRange_ThrowsArgumentAndWritesNothing(int size)
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 2);
        var allocation = await AllocateAsync(poolId);
        var before = await SnapshotAsync(poolId);
        var releases = Enumerable.Repeat(new LeaseRelease(allocation.AllocationId, allocation.Epoch), size).ToArray();

        var act = async () => await Store.ReleaseAsync(poolId, releases);

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage($"*{AllocatorLimits.MaxBatchSize}*");
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before, "a refused batch releases nothing");
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!.IsActive.Should().BeTrue();
    }

    [Fact]
    public async Task ReleaseBatch_NullListOrUnknownPool_IsRefused()
    {
        var act = async () => await Store.ReleaseAsync(await CreatePoolAsync(), (IReadOnlyList<LeaseRelease>)null!);
        await act.Should().ThrowAsync<ArgumentException>();

        await AssertPoolNotFoundAsync(() => Store.ReleaseAsync(NewPoolId(), [new LeaseRelease(Guid.NewGuid(), 1)]));
    }

    [Fact]
    public async Task ReleaseBatch_ConcurrentWithAllocationsAndOverlappingBatches_KeepsLoadsExact()
    {
        const int Workers = 6;
        const int Held = 48;
        var poolId = await CreatePoolWithWorkersAsync(workers: Workers, capacity: 20);
        var held = new List<Allocation>();
        for (var i = 0; i < Held; i++)
        {
            held.Add(await AllocateAsync(poolId, units: 1 + (i % 2)));
        }

        // Eight release batches cover every held allocation twice, each batch in its own shuffled
        // order, so batches wait on each other's rows from both ends; eight allocators take the
        // same workers' rows meanwhile.
        var batches = Enumerable.Range(0, 8).Select(b =>
        {
            var random = new Random(b);
            return held.Where((_, i) => i % 4 == b % 4)
                .OrderBy(_ => random.Next())
                .Select(a => new LeaseRelease(a.AllocationId, a.Epoch))
                .ToArray();
        }).ToArray();

        var outcomes = await RunTogetherAsync(16, async caller =>
        {
            if (caller % 2 == 0)
            {
                var batch = batches[caller / 2];
                var results = await Store.ReleaseAsync(poolId, batch);
                return (Released: batch.Zip(results).Where(p => p.Second.Status == LeaseStatus.Ok).Select(p => p.First.AllocationId).ToList(),
                        NotActive: results.Count(r => r.Status == LeaseStatus.NotActive),
                        Allocated: new List<Allocation>());
            }

            var allocated = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 4).Select(_ => Request())]);
            return (Released: new List<Guid>(), NotActive: 0,
                    Allocated: allocated.Where(o => o.Status == AllocationStatus.Allocated).Select(o => o.Allocation!).ToList());
        });

        var released = outcomes.SelectMany(o => o.Released).ToList();
        released.Should().OnlyHaveUniqueItems("an allocation is released once even when two batches name it");
        released.Should().BeEquivalentTo(held.Select(a => a.AllocationId), "every held allocation is released by one of the two batches naming it");
        outcomes.Sum(o => o.NotActive).Should().Be(Held, "the other batch naming it finds it ended");
        await AssertLoadsMatchAsync(poolId, outcomes.SelectMany(o => o.Allocated));
    }
}
