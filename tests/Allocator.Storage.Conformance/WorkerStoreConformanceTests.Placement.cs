namespace Allocator.Storage.Conformance;

/// <summary>
/// A pool's placement (issue 49): <see cref="Placement.Pack"/> takes the most-loaded eligible
/// worker that fits (score, then worker id, both descending), still skipping locked rows and
/// waiting only when every candidate is locked; batches fill the fullest worker first.
/// </summary>
public abstract partial class WorkerStoreConformanceTests
{
    private static readonly PoolSettings Packed = new() { Placement = Placement.Pack };

    [Fact]
    public async Task Pool_Placement_DefaultsToSpread_AndIsStoredAsSet()
    {
        var spread = await CreatePoolAsync();
        (await Store.GetPoolAsync(spread))!.Settings.Placement.Should().Be(Placement.Spread);

        var packed = await CreatePoolAsync(Packed);
        (await Store.GetPoolAsync(packed))!.Settings.Placement.Should().Be(Placement.Pack);
        (await Store.GetPoolStatisticsAsync(packed)).Settings.Placement.Should().Be(Placement.Pack);

        await Store.UpsertPoolAsync(packed, new PoolSettings());
        (await Store.GetPoolAsync(packed))!.Settings.Placement.Should().Be(Placement.Spread, "a PUT names the whole settings; placement left out is spread");
    }

    [Fact]
    public async Task Pack_EqualCapacities_FillsOneWorkerBeforeTheNext()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 3), Registration("w-b", 3), Registration("w-c", 3));

        var picks = new List<string>();
        for (var i = 0; i < 9; i++)
        {
            picks.Add(await AllocateWorkerIdAsync(poolId));
        }

        // All idle: the tie goes to the highest worker id (the reverse of spread's order); from
        // then on the worker in use is the fullest until it is full.
        picks.Should().Equal("w-c", "w-c", "w-c", "w-b", "w-b", "w-b", "w-a", "w-a", "w-a");
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task Pack_AfterReleases_RefillsTheFullestWorkerWithRoom()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 4), Registration("w-b", 4));
        var held = new List<Allocation>();
        for (var i = 0; i < 6; i++)
        {
            held.Add(await AllocateAsync(poolId));
        }

        // w-b 4/4, w-a 2/4. Free one slot on each: w-b 3/4 is now the fullest with room.
        var onA = held.First(a => a.WorkerId == "w-a");
        var onB = held.First(a => a.WorkerId == "w-b");
        (await Store.ReleaseAsync(poolId, onA.AllocationId, onA.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await Store.ReleaseAsync(poolId, onB.AllocationId, onB.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "w-b (3/4) is fuller than w-a (1/4)");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-b is full again");
    }

    [Fact]
    public async Task Pack_DifferentCapacities_FollowsLoadOverCapacityDescending()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 4), Registration("w-b", 10));
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "both idle: the higher worker id");
        await AllocateAsync(poolId);
        await AllocateAsync(poolId);

        // w-b at 3/10 (30%) is the fullest; w-a (idle) reports a load index of 40% and outranks it.
        var workers = await Store.GetWorkersAsync(poolId);
        (await Store.ReportLoadAsync(poolId, "w-a", workers.Single(w => w.WorkerId == "w-a").Epoch, loadIndex: 4_000)).Should().Be(WorkerUpdateStatus.Ok);

        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-a scores 40% by its own report, w-b 30%");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-a still scores 40% (its report outweighs 2/4)");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-a at 3/4 (75%)");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-a at 4/4 after this one");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b", "w-a is full");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 4, ["w-b"] = 4 });
    }

    [Fact]
    public async Task Pack_SeveralUnits_TakesTheFullestWorkerThatFits()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 8), Registration("w-b", 8));
        (await AllocateWorkerIdAsync(poolId, units: 6)).Should().Be("w-b");
        (await AllocateWorkerIdAsync(poolId, units: 3)).Should().Be("w-a", "w-b (6/8) has no room for 3");
        (await AllocateWorkerIdAsync(poolId, units: 2)).Should().Be("w-b", "w-b (6/8) is fuller than w-a (3/8) and has room for 2");
        (await AllocateWorkerIdAsync(poolId, units: 1)).Should().Be("w-a", "w-b is full");
    }

    [Fact]
    public async Task Pack_TagsDrainingAndHeartbeats_DecideEligibilityAsForSpread()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 5, "gpu"), Registration("w-b", 5), Registration("w-c", 5, "gpu"));
        (await Store.SetWorkerStateAsync(poolId, "w-c", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.Ok);

        (await AllocateWorkerIdAsync(poolId, tags: ["gpu"])).Should().Be("w-a", "w-c is draining, w-b has no gpu");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a", "w-a (1/5) is the fullest eligible worker");
    }

    [Fact]
    public async Task PackBatch_FillsTheFullestWorkerFirst_ThenTheNext_InRequestOrder()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 4), Registration("w-b", 4), Registration("w-c", 4));
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-c");

        var requests = Enumerable.Range(0, 6).Select(_ => Request()).ToList();
        var outcomes = await Store.AllocateAsync(poolId, requests);

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        outcomes.Select(o => o.Allocation!.SessionKey).Should().Equal(requests.Select(r => r.SessionKey), "outcomes are in request order");
        outcomes.Select(o => o.Allocation!.WorkerId).Should().Equal(["w-c", "w-c", "w-c", "w-b", "w-b", "w-b"], "w-c (1/4) is filled first, then the fullest of the idle ones");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 0, ["w-b"] = 3, ["w-c"] = 4 });
    }

    [Fact]
    public async Task PackBatch_MoreThanAWorkerHolds_SpillsOverAndSaysNoCapacityForTheRest()
    {
        var poolId = await CreatePoolAsync(Packed);
        await RegisterAsync(poolId, Registration("w-a", 2), Registration("w-b", 3));

        var outcomes = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 7).Select(_ => Request())]);

        outcomes.Take(5).Select(o => o.Allocation!.WorkerId).Should().Equal("w-b", "w-b", "w-b", "w-a", "w-a");
        outcomes.Skip(5).Should().OnlyContain(o => o.Status == AllocationStatus.NoCapacity);
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { ["w-a"] = 2, ["w-b"] = 3 });
    }

    [Fact]
    public async Task Pack_RowLockedOnTheFullest_TakesTheNextWithoutWaiting()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 10, Packed);
        var first = await AllocateWorkerIdAsync(poolId);
        first.Should().Be(WorkerId(2), "idle workers tie; pack order takes the highest id");

        var rowLock = await HoldRowLockAsync(poolId, WorkerId(2));
        try
        {
            var outcome = await WithinAsync(
                AllocateOneAsync(poolId, Request()),
                NoWaitBound,
                $"a pack allocation to skip the locked row of {WorkerId(2)} while the lock is still held");

            outcome.Status.Should().Be(AllocationStatus.Allocated);
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(1), "the fullest unlocked worker (all others idle; highest id)");
            var batch = await WithinAsync(Store.AllocateAsync(poolId, [Request(), Request()]), NoWaitBound, "a pack batch to skip the locked row");
            batch.Select(o => o.Allocation!.WorkerId).Should().Equal([WorkerId(1), WorkerId(1)], $"{WorkerId(1)} is now the fullest unlocked worker");
        }
        finally
        {
            await rowLock.DisposeAsync();
        }

        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(1), $"{WorkerId(1)} (3/10) is fuller than {WorkerId(2)} (1/10)");
    }

    [Fact]
    public async Task Pack_EveryEligibleRowLocked_WaitsAndSucceedsOnceALockIsReleased()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10, Packed);

        IAsyncDisposable? lock0 = await HoldRowLockAsync(poolId, WorkerId(0));
        IAsyncDisposable? lock1 = await HoldRowLockAsync(poolId, WorkerId(1));
        try
        {
            var allocation = AllocateOneAsync(poolId, Request());
            await AssertStillBlockedAsync(allocation, "every eligible row is locked, so a pack allocation waits too");

            // The blocking fallback waits for the row first in pack order (both idle: the higher id).
            await lock1.DisposeAsync();
            lock1 = null;
            var outcome = await WithinAsync(allocation, CompletionBound, $"the waiting pack allocation to complete after the row lock of {WorkerId(1)} was released");
            outcome.Status.Should().Be(AllocationStatus.Allocated, "capacity exists; the rows were merely locked");
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(1), "the only unlocked row, and the first in pack order");
        }
        finally
        {
            if (lock0 is not null)
            {
                await lock0.DisposeAsync();
            }

            if (lock1 is not null)
            {
                await lock1.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task Pack_StrictStrategy_WaitsForTheLockOnTheTrueFullest()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10, Packed with { Strategy = AllocationStrategy.Strict });
        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(1));

        IAsyncDisposable? rowLock = await HoldRowLockAsync(poolId, WorkerId(1));
        try
        {
            var strict = AllocateOneAsync(poolId, Request());
            await AssertStillBlockedAsync(strict, $"strict with pack waits for the row of {WorkerId(1)}, the true fullest worker");

            await rowLock.DisposeAsync();
            rowLock = null;
            var outcome = await WithinAsync(strict, CompletionBound, $"the strict pack allocation to complete after the row lock of {WorkerId(1)} was released");
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(1));
        }
        finally
        {
            if (rowLock is not null)
            {
                await rowLock.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task Placement_ChangedAtRunTime_ChangesTheVeryNextPick()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 10);
        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(0), "spread: all idle, the lowest id");

        await Store.UpsertPoolAsync(poolId, Packed);
        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(0), $"pack: {WorkerId(0)} (1/10) is the fullest");

        await Store.UpsertPoolAsync(poolId, new PoolSettings { Placement = Placement.Spread });
        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(1), "spread again: the least loaded, lowest id");
    }

    [Fact]
    public async Task Pack_64ParallelCallersOn4Workers_FillEverySlotExactly()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 16, Packed);

        var outcomes = await RunTogetherAsync(64, _ => AllocateOneAsync(poolId, Request()));

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 16, "64 callers fill 4 × 16 slots exactly");
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);
    }
}
