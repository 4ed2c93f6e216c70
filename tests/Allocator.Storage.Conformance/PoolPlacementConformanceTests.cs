namespace Allocator.Storage.Conformance;

/// <summary>
/// The pool directory and the removal of a pool that moved away (issue 23,
/// <see cref="IPoolPlacementStore"/>): what placing pools over several databases needs of each
/// database store. A suite of its own (each store's test project has a small subclass): a store
/// that routes over several databases passes <see cref="WorkerStoreConformanceTests"/> but is no
/// placement store itself.
/// </summary>
public abstract class PoolPlacementConformanceTests : IAsyncLifetime
{
    private static readonly TimeSpan CompletionBound = TimeSpan.FromSeconds(20);
    private static readonly TimeSpan NotificationBound = TimeSpan.FromSeconds(5);

    /// <summary>The store under test: fresh and empty for each test class instance (own schema).</summary>
    protected IWorkerStore Store { get; private set; } = null!;

    /// <summary>Creates a fresh, empty store that is also an <see cref="IPoolPlacementStore"/> (for a database: its own schema, migrated).</summary>
    protected abstract Task<IWorkerStore> CreateStoreAsync();

    /// <summary>The pool change feed of <see cref="Store"/>.</summary>
    protected abstract IPoolChangeFeed Changes { get; }

    /// <summary>Releases resources of the store.</summary>
    protected virtual Task DisposeStoreAsync(IWorkerStore store) => Task.CompletedTask;

    public async Task InitializeAsync() => Store = await CreateStoreAsync();

    public async Task DisposeAsync() => await DisposeStoreAsync(Store);

    private IPoolPlacementStore Placement => (IPoolPlacementStore)Store;

    private static string NewPoolId() => $"pool-{Guid.NewGuid():N}";

    private static string WorkerId(int index) => $"w-{index:D2}";

    private static WorkerRegistration Registration(string workerId, int capacity) => new(workerId, $"{workerId}.example:7000", capacity, []);

    private static Task<T> WithinAsync<T>(Task<T> task, TimeSpan timeout, string awaited) => TaskLimit.WithinAsync(task, timeout, awaited);

    private static Task<T[]> RunTogetherAsync<T>(int count, Func<int, Task<T>> caller) => ConformanceSupport.RunTogetherAsync(count, caller, CompletionBound);

    private async Task<string> CreatePoolAsync()
    {
        var poolId = NewPoolId();
        (await Store.UpsertPoolAsync(poolId, PoolSettings.Default)).Created.Should().BeTrue();
        return poolId;
    }

    private async Task<string> CreatePoolWithWorkersAsync(int workers, int capacity)
    {
        var poolId = await CreatePoolAsync();
        await Store.RegisterWorkersAsync(poolId, [.. Enumerable.Range(0, workers).Select(i => Registration(WorkerId(i), capacity))]);
        return poolId;
    }

    private async Task<Allocation> AllocateAsync(string poolId)
    {
        var outcome = (await Store.AllocateAsync(poolId, [new AllocationRequest($"session-{Guid.NewGuid():N}", 1)]))[0];
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        return outcome.Allocation!;
    }

    [Fact]
    public async Task GetPlacement_PoolWithoutEntry_IsNull()
    {
        var poolId = await CreatePoolAsync();

        (await Placement.GetPlacementAsync(poolId)).Should().BeNull("a pool without an entry lives in the default database");
    }

    [Fact]
    public async Task ReplacePlacement_FirstEntry_IsRecordedOnce()
    {
        var poolId = NewPoolId();

        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(poolId, "b"))).Should().BeTrue();
        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(poolId, "c"))).Should().BeFalse("the pool has an entry already");

        (await Placement.GetPlacementAsync(poolId)).Should().Be(new PoolPlacement(poolId, "b"));
    }

    [Fact]
    public async Task ReplacePlacement_ComparesTheWholeEntry_ThenSetsIt()
    {
        var poolId = NewPoolId();
        var placed = new PoolPlacement(poolId, "a");
        var moving = placed with { MovingTo = "b" };
        (await Placement.ReplacePlacementAsync(null, placed)).Should().BeTrue();

        (await Placement.ReplacePlacementAsync(placed with { Database = "b" }, moving)).Should().BeFalse("the database differs");
        (await Placement.ReplacePlacementAsync(placed with { MovingTo = "c" }, moving)).Should().BeFalse("no move is under way");
        (await Placement.ReplacePlacementAsync(placed, moving)).Should().BeTrue();
        (await Placement.GetPlacementAsync(poolId)).Should().Be(moving);
        (await Placement.ReplacePlacementAsync(placed, new PoolPlacement(poolId, "b"))).Should().BeFalse("a move is under way");
        (await Placement.ReplacePlacementAsync(moving, new PoolPlacement(poolId, "b"))).Should().BeTrue();

        (await Placement.GetPlacementAsync(poolId)).Should().Be(new PoolPlacement(poolId, "b"));
    }

    [Fact]
    public async Task ReplacePlacement_ConcurrentFromOneEntry_ExactlyOneWins()
    {
        var poolId = NewPoolId();
        var placed = new PoolPlacement(poolId, "a");
        (await Placement.ReplacePlacementAsync(null, placed)).Should().BeTrue();

        var results = await RunTogetherAsync(16, i => Placement.ReplacePlacementAsync(placed, placed with { MovingTo = $"target-{i}" }));

        results.Count(r => r).Should().Be(1);
        var winner = Array.IndexOf(results, true);
        (await Placement.GetPlacementAsync(poolId)).Should().Be(placed with { MovingTo = $"target-{winner}" });
    }

    [Fact]
    public async Task ReplacePlacement_RaisesSettingsChangedOfThePool()
    {
        var poolId = NewPoolId();
        var changed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = Changes.Subscribe(change =>
        {
            if (change == new PoolChanged(poolId, PoolChangeKind.SettingsChanged))
            {
                changed.TrySetResult();
            }
        });

        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(poolId, "b"))).Should().BeTrue();

        await TaskLimit.WithinAsync(changed.Task, NotificationBound, $"a SettingsChanged notification for pool {poolId} after its directory entry changed (routes cached elsewhere are dropped on it)");
    }

    [Fact]
    public async Task CountPools_CountsEntriesByDatabase_AndPoolsWithoutEntryUnderTheDefault()
    {
        var before = await Placement.CountPoolsAsync("main");
        await CreatePoolAsync();
        await CreatePoolAsync();
        var placedHere = await CreatePoolAsync();
        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(placedHere, "main"))).Should().BeTrue();
        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(NewPoolId(), "second"))).Should().BeTrue();
        (await Placement.ReplacePlacementAsync(null, new PoolPlacement(NewPoolId(), "second", MovingTo: "third"))).Should().BeTrue();

        var counts = await Placement.CountPoolsAsync("main");

        counts.GetValueOrDefault("main").Should().Be(before.GetValueOrDefault("main") + 3, "two pools without an entry and one placed here by name");
        counts.GetValueOrDefault("second").Should().Be(before.GetValueOrDefault("second") + 1);
        counts.GetValueOrDefault("third").Should().Be(before.GetValueOrDefault("third") + 1, "a pool being moved counts where it is going");
    }

    [Fact]
    public async Task RemovePoolIfEmpty_UnknownPool_FindsNothing()
    {
        (await Placement.RemovePoolIfEmptyAsync(NewPoolId())).Should().Be(new PoolRemoval(Found: false, Removed: false, Workers: 0, ActiveAllocations: 0));
    }

    [Fact]
    public async Task RemovePoolIfEmpty_WithWorkersOrAllocations_KeepsThePool()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 2);
        await AllocateAsync(poolId);

        var removal = await Placement.RemovePoolIfEmptyAsync(poolId);

        removal.Should().Be(new PoolRemoval(Found: true, Removed: false, Workers: 2, ActiveAllocations: 1));
        (await Store.GetPoolStatisticsAsync(poolId)).Workers.Should().Be(2, "nothing was removed");
    }

    [Fact]
    public async Task RemovePoolIfEmpty_DrainedAndDeregistered_RemovesIt_AndLateCallsFindNoPool()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 2);
        var allocation = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await Store.DeregisterWorkerAsync(poolId, WorkerId(0))).Found.Should().BeTrue();

        (await Placement.RemovePoolIfEmptyAsync(poolId)).Should().Be(new PoolRemoval(Found: true, Removed: true, Workers: 0, ActiveAllocations: 0));

        (await Store.GetPoolAsync(poolId)).Should().BeNull();
        var register = () => Store.RegisterWorkersAsync(poolId, [Registration("late", 1)]);
        (await register.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound, "a stale route's registration must not land in a removed pool");
        (await Store.UpsertPoolAsync(poolId, PoolSettings.Default)).Created.Should().BeTrue("a pool moved back is created again");
    }

    [Fact]
    public async Task RemovePoolIfEmpty_RacingRegistrations_NeverLosesAConfirmedWorker()
    {
        // The removal's count and its delete must see every registration that committed before
        // it: a registration confirmed to its caller and then deleted with the pool would be a
        // worker the caller believes in and the store no longer has.
        for (var round = 0; round < 20; round++)
        {
            var poolId = await CreatePoolAsync();
            var outcomes = await RunTogetherAsync(2, async i =>
            {
                if (i == 1)
                {
                    return (Registered: false, Removal: await Placement.RemovePoolIfEmptyAsync(poolId));
                }

                try
                {
                    await Store.RegisterWorkersAsync(poolId, [Registration("racer", 1)]);
                    return (Registered: true, Removal: default(PoolRemoval));
                }
                catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.NotFound)
                {
                    return (Registered: false, Removal: default(PoolRemoval));
                }
            });
            var (registered, removed) = (outcomes[0].Registered, outcomes[1].Removal);

            if (registered)
            {
                removed.Removed.Should().BeFalse("round {0}: the registration was confirmed, so the pool was not empty", round);
                (await Store.GetWorkerAsync(poolId, "racer")).Should().NotBeNull("round {0}: a confirmed worker stays", round);
            }
            else
            {
                removed.Removed.Should().BeTrue("round {0}: the registration found no pool because it was removed", round);
            }
        }
    }
}
