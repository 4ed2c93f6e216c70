namespace Allocator.Storage.Conformance;

/// <summary>Row locks held by other transactions, and many callers at once.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_RowLockedOnLeastLoaded_TakesNextWithoutWaiting()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 3, capacity: 10);

        var rowLock = await HoldRowLockAsync(poolId, WorkerId(0));
        try
        {
            // The lock is held until after the assertion: completing at all proves the call skipped it.
            var outcome = await WithinAsync(
                AllocateOneAsync(poolId, Request()),
                NoWaitBound,
                $"an allocation to skip the locked row of {WorkerId(0)} while the lock is still held");

            outcome.Status.Should().Be(AllocationStatus.Allocated);
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(1), "it is the least-loaded worker whose row is not locked");
        }
        finally
        {
            await rowLock.DisposeAsync();
        }

        (await AllocateWorkerIdAsync(poolId)).Should().Be(WorkerId(0), "once unlocked it is the least-loaded worker again");
        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { [WorkerId(0)] = 1, [WorkerId(1)] = 1, [WorkerId(2)] = 0 });
    }

    [Fact]
    public async Task Allocate_EveryEligibleRowLocked_WaitsAndSucceedsOnceALockIsReleased()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);

        IAsyncDisposable? lock0 = await HoldRowLockAsync(poolId, WorkerId(0));
        IAsyncDisposable? lock1 = await HoldRowLockAsync(poolId, WorkerId(1));
        try
        {
            // Called directly, not through Task.Run, so the call has certainly started (and sent
            // its statement) before the bounded check below.
            var allocation = AllocateOneAsync(poolId, Request());

            await AssertStillBlockedAsync(allocation, "every eligible row is locked, so the allocation must wait (blocking fallback) rather than answer no capacity");

            await lock0.DisposeAsync();
            lock0 = null;
            var outcome = await WithinAsync(allocation, CompletionBound, $"the waiting allocation to complete after the row lock of {WorkerId(0)} was released");

            outcome.Status.Should().Be(AllocationStatus.Allocated, "capacity exists; the rows were merely locked");
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(0), "it is the only unlocked row and the least-loaded one");
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

        (await LoadsAsync(poolId)).Should().BeEquivalentTo(new Dictionary<string, int> { [WorkerId(0)] = 1, [WorkerId(1)] = 0 });
    }

    [Fact]
    public async Task Allocate_StrictStrategy_WaitsForLockOnTrueLeastLoaded()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);

        IAsyncDisposable? rowLock = await HoldRowLockAsync(poolId, WorkerId(0));
        try
        {
            var skipped = await WithinAsync(AllocateOneAsync(poolId, Request()), NoWaitBound, "a skip-locked allocation to pass over the locked row");
            skipped.Allocation!.WorkerId.Should().Be(WorkerId(1), "skip-locked passes over the locked row");

            // The strategy is a runtime setting: switching it changes the very next allocation.
            await Store.UpsertPoolAsync(poolId, new PoolSettings { Strategy = AllocationStrategy.Strict });
            var strict = AllocateOneAsync(poolId, Request());

            await AssertStillBlockedAsync(strict, $"the strict strategy waits for the row of {WorkerId(0)}, the true least-loaded worker");

            await rowLock.DisposeAsync();
            rowLock = null;
            var outcome = await WithinAsync(strict, CompletionBound, $"the strict allocation to complete after the row lock of {WorkerId(0)} was released");
            outcome.Status.Should().Be(AllocationStatus.Allocated);
            outcome.Allocation!.WorkerId.Should().Be(WorkerId(0), "strict takes the true least-loaded worker");
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
    public async Task Allocate_64ParallelCallersOn2Workers_FillEverySlotExactly()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 32);

        await AssertParallelCallersFillPoolAsync(poolId, callers: 64);

        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 32);
    }

    [Fact]
    public async Task Allocate_64ParallelCallersOn20Workers_FillEverySlotExactly()
    {
        var poolId = await CreatePoolAsync();
        // 4 workers of 4 slots and 16 of 3: 64 slots in all.
        await RegisterAsync(poolId, [.. Enumerable.Range(0, 20).Select(i => Registration(WorkerId(i), i < 4 ? 4 : 3))]);

        await AssertParallelCallersFillPoolAsync(poolId, callers: 64);

        (await Store.GetWorkersAsync(poolId)).Should().OnlyContain(w => w.Load == w.Capacity, "every slot is filled");
    }

    [Fact]
    public async Task Allocate_ParallelCallersBeyondCapacity_FillEverySlotThenNoCapacity()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 12);

        var outcomes = await RunTogetherAsync(64, _ => AllocateOneAsync(poolId, Request()));

        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(48, "the pool has exactly 48 slots");
        outcomes.Count(o => o.Status == AllocationStatus.NoCapacity).Should().Be(16);
        await AssertLoadsMatchAsync(poolId, outcomes.Where(o => o.Allocation is not null).Select(o => o.Allocation!));
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 12);
    }

    [Fact]
    public async Task Allocate_ConcurrentWithReleases_LoadsStayExact()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 16);
        var existing = new List<Allocation>();
        for (var i = 0; i < 32; i++)
        {
            existing.Add(await AllocateAsync(poolId));
        }

        // 32 releases race 32 allocations; 64 slots means no allocation can lack room.
        var results = await RunTogetherAsync(64, async i =>
        {
            if (i % 2 == 0)
            {
                var release = await Store.ReleaseAsync(poolId, existing[i / 2].AllocationId, existing[i / 2].Epoch);
                release.Status.Should().Be(LeaseStatus.Ok);
                return null;
            }

            var outcome = await AllocateOneAsync(poolId, Request());
            outcome.Status.Should().Be(AllocationStatus.Allocated, "there are always at least 32 free slots");
            return outcome.Allocation;
        });

        var allocated = results.Where(a => a is not null).Select(a => a!).ToList();
        allocated.Should().HaveCount(32);
        await AssertLoadsMatchAsync(poolId, allocated);
    }

    /// <summary>
    /// Starts <paramref name="callers"/> single-request allocations together on a pool whose
    /// capacity is exactly <paramref name="callers"/> slots; every one must succeed (no false no
    /// capacity), loads must equal the allocations, and the pool must then be full.
    /// </summary>
    private async Task AssertParallelCallersFillPoolAsync(string poolId, int callers)
    {
        var statistics = await Store.GetPoolStatisticsAsync(poolId);
        statistics.Capacity.Should().Be(callers, "the test sizes the pool to the number of callers");

        var outcomes = await RunTogetherAsync(callers, _ => AllocateOneAsync(poolId, Request()));

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated, "capacity equals the requests, so none may be refused");
        var allocations = outcomes.Select(o => o.Allocation!).ToList();
        await AssertLoadsMatchAsync(poolId, allocations);

        var after = await Store.GetPoolStatisticsAsync(poolId);
        after.FreeSlots.Should().Be(0);
        after.Load.Should().Be(callers);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity, "the pool is full");
    }
}
