namespace Allocator.Storage.Conformance;

/// <summary>Pool settings, statistics and change notifications.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task UpsertPool_CreateThenUpdate_SettingsRoundTrip()
    {
        var poolId = NewPoolId();
        var created = new PoolSettings { DefaultLease = TimeSpan.FromMinutes(5), MaxWait = TimeSpan.FromSeconds(2) };
        var updated = new PoolSettings
        {
            Strategy = AllocationStrategy.Strict,
            DefaultLease = null,
            MaxWait = TimeSpan.FromSeconds(30),
            HeartbeatTimeout = TimeSpan.FromMinutes(1),
            SerializeRegistrations = true,
        };

        var first = await Store.UpsertPoolAsync(poolId, created);
        (await Store.GetPoolAsync(poolId)).Should().BeEquivalentTo(new Pool(poolId, created));
        var second = await Store.UpsertPoolAsync(poolId, updated);

        first.Created.Should().BeTrue();
        first.Pool.Should().BeEquivalentTo(new Pool(poolId, created));
        second.Created.Should().BeFalse();
        second.Pool.Should().BeEquivalentTo(new Pool(poolId, updated));
        (await Store.GetPoolAsync(poolId)).Should().BeEquivalentTo(new Pool(poolId, updated));
        (await Store.GetPoolStatisticsAsync(poolId)).Settings.Should().BeEquivalentTo(updated);
    }

    [Fact]
    public async Task UpsertPool_Update_KeepsWorkersAndAllocations()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 3);
        var allocation = await AllocateAsync(poolId);

        await Store.UpsertPoolAsync(poolId, new PoolSettings { Strategy = AllocationStrategy.Strict });

        (await Store.GetWorkersAsync(poolId)).Should().HaveCount(2);
        await AssertLoadsMatchAsync(poolId, [allocation]);
    }

    [Fact]
    public async Task GetPool_Unknown_ReturnsNull() =>
        (await Store.GetPoolAsync(NewPoolId())).Should().BeNull();

    [Fact]
    public async Task Allocate_StrictStrategy_TakesTheTrueLeastLoaded()
    {
        var poolId = await CreatePoolAsync(new PoolSettings { Strategy = AllocationStrategy.Strict });
        await RegisterAsync(poolId, Registration("w-a", 2), Registration("w-b", 10));

        var picks = new List<string>();
        for (var i = 0; i < 12; i++)
        {
            picks.Add(await AllocateWorkerIdAsync(poolId));
        }

        picks.Should().Equal("w-a", "w-b", "w-b", "w-b", "w-b", "w-b", "w-a", "w-b", "w-b", "w-b", "w-b", "w-b");
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task AllocateBatch_StrictStrategy_SpreadsWithinOneSlot()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 5, capacity: 10, new PoolSettings { Strategy = AllocationStrategy.Strict });

        var outcomes = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 23).Select(_ => Request())]);

        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 4 || load == 5);
        await AssertLoadsMatchAsync(poolId, outcomes.Select(o => o.Allocation!));
    }

    [Fact]
    public async Task GetPoolStatistics_ReportsWorkersCapacityLoadAndSpread()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 4), Registration("w-b", 6), Registration("w-c", 10));
        await Store.SetWorkerStateAsync(poolId, "w-c", WorkerState.Draining);
        for (var i = 0; i < 5; i++)
        {
            await AllocateAsync(poolId);
        }

        var statistics = await Store.GetPoolStatisticsAsync(poolId);

        // Picks: w-a, w-b, w-b, w-a, w-b (w-a 2/4, w-b 3/6); w-c is draining.
        statistics.PoolId.Should().Be(poolId);
        statistics.Workers.Should().Be(3);
        statistics.AvailableWorkers.Should().Be(2);
        statistics.Capacity.Should().Be(20);
        statistics.Load.Should().Be(5);
        statistics.FreeSlots.Should().Be(5, "free slots count only available workers: (4 - 2) + (6 - 3)");
        statistics.ActiveAllocations.Should().Be(5);
        statistics.MinLoad.Should().Be(2);
        statistics.MaxLoad.Should().Be(3);
        statistics.LoadSpread.Should().Be(1);
        statistics.MinScore.Should().Be(WorkerScore.Full / 2);
        statistics.MaxScore.Should().Be(WorkerScore.Full / 2);
        statistics.Utilization.Should().BeApproximately(0.25, 1e-9);
    }

    [Fact]
    public async Task GetPoolStatistics_EmptyPool_ReportsZeros()
    {
        var poolId = await CreatePoolAsync();

        var statistics = await Store.GetPoolStatisticsAsync(poolId);

        statistics.Should().BeEquivalentTo(new
        {
            PoolId = poolId,
            Workers = 0,
            AvailableWorkers = 0,
            Capacity = 0L,
            Load = 0L,
            FreeSlots = 0L,
            ActiveAllocations = 0L,
            MinLoad = 0,
            MaxLoad = 0,
            LoadSpread = 0,
            Utilization = 0.0,
        });
    }

    [Fact]
    public async Task SubscribeToPoolChanges_Release_RaisesCapacityAvailable()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 1);
        var allocation = await AllocateAsync(poolId);
        var released = 0;
        var afterRelease = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = Changes.Subscribe(change =>
        {
            // Only a change seen after the release started counts, so earlier notifications
            // (registration) delivered late cannot satisfy the test.
            if (change is { Kind: PoolChangeKind.CapacityAvailable } && change.PoolId == poolId && Volatile.Read(ref released) == 1)
            {
                afterRelease.TrySetResult();
            }
        });

        Volatile.Write(ref released, 1);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        await WithinAsync(afterRelease.Task, NotificationBound, $"a CapacityAvailable notification for pool {poolId} after a release");
    }

    [Fact]
    public async Task SubscribeToPoolChanges_SettingsUpdate_RaisesSettingsChanged()
    {
        var poolId = await CreatePoolAsync();
        var settingsChanged = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = Changes.Subscribe(change =>
        {
            if (change == new PoolChanged(poolId, PoolChangeKind.SettingsChanged))
            {
                settingsChanged.TrySetResult();
            }
        });

        await Store.UpsertPoolAsync(poolId, new PoolSettings { Strategy = AllocationStrategy.Strict });

        await WithinAsync(settingsChanged.Task, NotificationBound, $"a SettingsChanged notification for pool {poolId} after its settings were updated");
    }

    [Fact]
    public async Task SubscribeToPoolChanges_SameHandlerTwiceDisposeOne_OtherStillDelivers()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 1);
        var allocation = await AllocateAsync(poolId);
        var released = 0;
        var afterRelease = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        void Handler(PoolChanged change)
        {
            if (change is { Kind: PoolChangeKind.CapacityAvailable } && change.PoolId == poolId && Volatile.Read(ref released) == 1)
            {
                afterRelease.TrySetResult();
            }
        }

        // Two subscribers may pass equal delegates (one component watching two things); ending
        // one subscription must not end the other.
        var first = Changes.Subscribe(Handler);
        using var second = Changes.Subscribe(Handler);
        first.Dispose();
        first.Dispose();

        Volatile.Write(ref released, 1);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        await WithinAsync(afterRelease.Task, NotificationBound, $"a CapacityAvailable notification for pool {poolId} on the subscription still open");
    }
}
