namespace Allocator.Storage.Conformance;

/// <summary>Which worker an allocation picks: least score, ties by worker id, only eligible workers.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_EqualScores_TieBrokenByOrdinalWorkerId()
    {
        // Ordinal order is "w-A" < "w-B" < "w-a" (a culture-aware collation would put "w-a" first).
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 10), Registration("w-B", 10), Registration("w-A", 10));

        var picks = new List<string>();
        for (var i = 0; i < 6; i++)
        {
            picks.Add(await AllocateWorkerIdAsync(poolId));
        }

        picks.Should().Equal("w-A", "w-B", "w-a", "w-A", "w-B", "w-a");
        (await Store.GetWorkersAsync(poolId)).Select(w => w.WorkerId).Should().Equal(["w-A", "w-B", "w-a"], "workers are listed in ordinal id order");
    }

    [Fact]
    public async Task Allocate_DifferentCapacities_FollowsLoadOverCapacityThenWorkerId()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 2), Registration("w-b", 10));

        var picks = new List<string>();
        for (var i = 0; i < 12; i++)
        {
            picks.Add(await AllocateWorkerIdAsync(poolId));
        }

        // w-a at 1/2 outranks w-b until w-b reaches 5/10; the tie goes to w-a, then w-a is full.
        picks.Should().Equal("w-a", "w-b", "w-b", "w-b", "w-b", "w-b", "w-a", "w-b", "w-b", "w-b", "w-b", "w-b");
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity, "all 12 slots are taken");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 2, ["w-b"] = 10 });
    }

    [Fact]
    public async Task Allocate_SeveralUnits_TakesThemOnOneWorkerWithRoom()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 2), Registration("w-b", 8));

        (await AllocateWorkerIdAsync(poolId, units: 3)).Should().Be("w-b", "w-a has only 2 slots");
        (await AllocateWorkerIdAsync(poolId, units: 2)).Should().Be("w-a", "w-a (0/2) is less loaded than w-b (3/8)");
        (await AllocateOneAsync(poolId, Request(units: 6))).Status.Should().Be(AllocationStatus.NoCapacity, "no single worker has 6 free slots although 5 + 0 are free");
        (await AllocateWorkerIdAsync(poolId, units: 5)).Should().Be("w-b");

        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 2, ["w-b"] = 8 });
    }

    [Fact]
    public async Task Allocate_UnitsAboveEveryCapacity_ReturnsNoCapacityAndWritesNothing()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 4);
        var before = await SnapshotAsync(poolId);

        var outcome = await AllocateOneAsync(poolId, Request(units: 5));

        outcome.Status.Should().Be(AllocationStatus.NoCapacity);
        outcome.Allocation.Should().BeNull();
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
    }

    [Fact]
    public async Task Allocate_PoolWithoutWorkers_ReturnsNoCapacity()
    {
        var poolId = await CreatePoolAsync();

        var outcome = await AllocateOneAsync(poolId, Request());

        outcome.Status.Should().Be(AllocationStatus.NoCapacity);
        outcome.Allocation.Should().BeNull();
    }

    [Fact]
    public async Task Allocate_RequiredTags_OnlyWorkersCarryingEveryTag()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5, "gpu"), Registration("w-b", 5, "gpu", "linux"), Registration("w-c", 5, "linux"));

        for (var i = 0; i < 3; i++)
        {
            (await AllocateWorkerIdAsync(poolId, tags: ["linux", "gpu"])).Should().Be("w-b", "only w-b carries both gpu and linux");
        }

        (await AllocateWorkerIdAsync(poolId, tags: ["linux"])).Should().Be("w-c", "w-c (0/5) is less loaded than w-b (3/5)");
        (await AllocateWorkerIdAsync(poolId, tags: ["gpu"])).Should().Be("w-a", "w-a (0/5) is less loaded than w-b (3/5)");
        (await AllocateOneAsync(poolId, Request(tags: ["gpu", "windows"]))).Status.Should().Be(AllocationStatus.NoCapacity, "no worker carries windows");

        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 1, ["w-b"] = 3, ["w-c"] = 1 });
    }

    [Fact]
    public async Task Allocate_TaggedWorkerFull_ReturnsNoCapacityEvenWithRoomElsewhere()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 1, "gpu"), Registration("w-b", 10));

        (await AllocateWorkerIdAsync(poolId, tags: ["gpu"])).Should().Be("w-a");
        (await AllocateOneAsync(poolId, Request(tags: ["gpu"]))).Status.Should().Be(AllocationStatus.NoCapacity);
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "an untagged request may use any worker");
    }

    [Fact]
    public async Task Allocate_DrainingAndOfflineWorkers_NeverChosen()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 10), Registration("w-b", 10), Registration("w-c", 3));
        (await Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.Ok);
        (await Store.SetWorkerStateAsync(poolId, "w-b", WorkerState.Offline)).Should().Be(WorkerUpdateStatus.Ok);

        for (var i = 0; i < 3; i++)
        {
            (await AllocateWorkerIdAsync(poolId)).Should().Be("w-c", "w-a is draining and w-b is offline");
        }

        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity, "draining and offline slots are not eligible");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 0, ["w-b"] = 0, ["w-c"] = 3 });

        (await Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Available)).Should().Be(WorkerUpdateStatus.Ok);
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "undrain makes w-a eligible again");
    }

    [Fact]
    public async Task Allocate_ReportedLoadIndex_RanksWorkerLater()
    {
        var poolId = await CreatePoolAsync();
        var outcomes = await RegisterAsync(poolId, Registration("w-a", 10), Registration("w-b", 10));
        var epochA = EpochOf(outcomes, "w-a");

        (await Store.ReportLoadAsync(poolId, "w-a", epochA, loadIndex: 5_000)).Should().Be(WorkerUpdateStatus.Ok);
        (await GetWorkerAsync(poolId, "w-a")).ReportedLoadIndex.Should().Be(5_000);

        var picks = new List<string>();
        for (var i = 0; i < 6; i++)
        {
            picks.Add(await AllocateWorkerIdAsync(poolId));
        }

        // w-a scores 5000 (half full) by its own report; w-b wins until it is half full too.
        picks.Should().Equal("w-b", "w-b", "w-b", "w-b", "w-b", "w-a");
    }

    [Fact]
    public async Task Allocate_StaleHeartbeat_WorkerNotEligibleUntilItReports()
    {
        var poolId = await CreatePoolAsync(new PoolSettings { HeartbeatTimeout = TimeSpan.FromSeconds(1) });
        var outcomes = await RegisterAsync(poolId, Registration("w-a", 10), Registration("w-b", 10));

        // The heartbeat is database time, so real time has to pass; this is not synchronisation.
        await Task.Delay(TimeSpan.FromSeconds(1.5));
        (await Store.ReportLoadAsync(poolId, "w-b", EpochOf(outcomes, "w-b"), loadIndex: null)).Should().Be(WorkerUpdateStatus.Ok);

        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "w-a has not sent a heartbeat within the timeout");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "w-a is still stale");

        (await Store.ReportLoadAsync(poolId, "w-a", EpochOf(outcomes, "w-a"), loadIndex: null)).Should().Be(WorkerUpdateStatus.Ok);
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "a heartbeat makes w-a eligible again");
    }
}
