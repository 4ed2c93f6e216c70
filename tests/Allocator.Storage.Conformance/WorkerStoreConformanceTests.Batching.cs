namespace Allocator.Storage.Conformance;

/// <summary>Many requests in one call: water filling, one outcome per request, in request order.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task AllocateBatch_64RequestsOn10Workers_SpreadWithinOneSlot()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 10, capacity: 10);
        var requests = Enumerable.Range(0, 64).Select(_ => Request()).ToList();

        var outcomes = await Store.AllocateAsync(poolId, requests);

        outcomes.Should().HaveCount(64);
        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        outcomes.Select(o => o.Allocation!.SessionKey).Should().Equal(requests.Select(r => r.SessionKey), "outcomes are in request order");
        await AssertLoadsMatchAsync(poolId, outcomes.Select(o => o.Allocation!));

        var loads = (await LoadsAsync(poolId)).Values.ToList();
        (loads.Max() - loads.Min()).Should().BeLessThanOrEqualTo(1, "each pick sees the batch's earlier picks (water filling)");
        loads.Should().OnlyContain(load => load == 6 || load == 7);
        (await Store.GetPoolStatisticsAsync(poolId)).LoadSpread.Should().BeLessThanOrEqualTo(1);
    }

    [Fact]
    public async Task AllocateBatch_OnUnevenPool_FillsTheLeastLoadedFirst()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 10);
        for (var i = 0; i < 6; i++)
        {
            await AllocateAsync(poolId);
        }

        // Loads are now 2, 2, 1, 1; a batch of 6 must even them out at 3 each.
        (await LoadsAsync(poolId)).Values.Should().BeEquivalentTo([2, 2, 1, 1]);
        var outcomes = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 6).Select(_ => Request())]);

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 3);
    }

    [Fact]
    public async Task AllocateBatch_MixedUnitsAndTags_EachGetsItsOwnOutcome()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 4, "gpu"), Registration("w-b", 4), Registration("w-c", 2, "linux"));
        AllocationRequest[] requests =
        [
            Request(units: 2, tags: ["gpu"]),
            Request(units: 1, tags: ["linux"]),
            Request(units: 3, tags: ["windows"]),
            Request(units: 5),
            Request(units: 4),
            Request(units: 1, tags: ["linux"]),
            Request(units: 1, tags: ["linux"]),
        ];

        var outcomes = await Store.AllocateAsync(poolId, requests);

        outcomes.Select(o => o.Status).Should().Equal(
            AllocationStatus.Allocated,
            AllocationStatus.Allocated,
            AllocationStatus.NoCapacity,
            AllocationStatus.NoCapacity,
            AllocationStatus.Allocated,
            AllocationStatus.Allocated,
            AllocationStatus.NoCapacity);
        outcomes.Select(o => o.Allocation?.WorkerId).Should().Equal("w-a", "w-c", null, null, "w-b", "w-c", null);
        for (var i = 0; i < requests.Length; i++)
        {
            if (outcomes[i].Allocation is { } allocation)
            {
                allocation.SessionKey.Should().Be(requests[i].SessionKey);
                allocation.Units.Should().Be(requests[i].Units);
            }
        }

        await AssertLoadsMatchAsync(poolId, outcomes.Where(o => o.Allocation is not null).Select(o => o.Allocation!));
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 2, ["w-b"] = 4, ["w-c"] = 2 });
    }

    [Fact]
    public async Task AllocateBatch_MoreRequestsThanSlots_FillsEverySlotAndRefusesTheRest()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 2);

        var outcomes = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 8).Select(_ => Request())]);

        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(6, "the pool has 6 slots");
        outcomes.Count(o => o.Status == AllocationStatus.NoCapacity).Should().Be(2);
        await AssertLoadsMatchAsync(poolId, outcomes.Where(o => o.Allocation is not null).Select(o => o.Allocation!));
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 2);
    }

    [Fact]
    public async Task AllocateBatch_SameSessionKeyTwice_OneAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var key = NewSessionKey();

        var outcomes = await Store.AllocateAsync(poolId, [Request(units: 2, sessionKey: key), Request(), Request(units: 2, sessionKey: key)]);

        outcomes.Should().OnlyContain(o => o.Allocation != null);
        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(2, "the repeated key must not get a second allocation");
        outcomes.Count(o => o.Status == AllocationStatus.Existing).Should().Be(1);
        outcomes[0].Allocation!.AllocationId.Should().Be(outcomes[2].Allocation!.AllocationId);
        await AssertLoadsMatchAsync(poolId, [outcomes[0].Allocation!, outcomes[1].Allocation!]);
    }

    [Fact]
    public async Task AllocateBatch_ConcurrentBatches_FillEverySlotExactly()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 16);

        var batches = await RunTogetherAsync(8, _ => Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 8).Select(_ => Request())]));

        var outcomes = batches.SelectMany(b => b).ToList();
        outcomes.Should().HaveCount(64);
        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated, "64 requests meet exactly 64 slots");
        await AssertLoadsMatchAsync(poolId, outcomes.Select(o => o.Allocation!));
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 16);
    }
}
