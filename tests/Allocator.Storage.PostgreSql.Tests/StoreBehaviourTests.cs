namespace Allocator.Storage.PostgreSql.Tests;

public sealed class StoreBehaviourTests : PostgresStoreTestBase
{
    [Fact]
    public async Task Allocate_PicksLeastLoadedThenOrdinalId()
    {
        await CreatePoolAsync("p", workers: 3, capacity: 2);
        var first = await Store.AllocateAsync("p", [new AllocationRequest("s1")]);
        first[0].Status.Should().Be(AllocationStatus.Allocated);
        first[0].Allocation!.WorkerId.Should().Be("w000");
        var batch = await Store.AllocateAsync("p", [new AllocationRequest("s2"), new AllocationRequest("s3"), new AllocationRequest("s4")]);
        batch.Select(o => o.Allocation!.WorkerId).Should().Equal("w001", "w002", "w000");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task Allocate_BatchOf64On10Workers_SpreadsWithinOneSlot()
    {
        await CreatePoolAsync("p", workers: 10, capacity: 10);
        var outcomes = await Store.AllocateAsync("p", [.. Enumerable.Range(0, 64).Select(i => new AllocationRequest($"s{i}"))]);
        outcomes.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        var stats = await Store.GetPoolStatisticsAsync("p");
        stats.LoadSpread.Should().BeLessThanOrEqualTo(1);
        stats.Load.Should().Be(64);
        stats.ActiveAllocations.Should().Be(64);
    }

    [Fact]
    public async Task Allocate_UnitsAndTags_AreRespected()
    {
        await Store.UpsertPoolAsync("p", PoolSettings.Default);
        await Store.RegisterWorkersAsync("p", [new WorkerRegistration("a", "a:1", 4, ["gpu"]), new WorkerRegistration("b", "b:1", 2)]);
        var outcomes = await Store.AllocateAsync("p", [new AllocationRequest("s1", 3), new AllocationRequest("s2", 1, ["gpu"]), new AllocationRequest("s3", 2, ["gpu"])]);
        outcomes[0].Allocation!.WorkerId.Should().Be("a");
        outcomes[1].Allocation!.WorkerId.Should().Be("a");
        outcomes[2].Status.Should().Be(AllocationStatus.NoCapacity);
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task Allocate_SameSessionKey_ReturnsExisting()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 5);
        var first = (await Store.AllocateAsync("p", [new AllocationRequest("k")]))[0];
        var again = await Store.AllocateAsync("p", [new AllocationRequest("k"), new AllocationRequest("k")]);
        again.Should().OnlyContain(o => o.Status == AllocationStatus.Existing && o.Allocation!.AllocationId == first.Allocation!.AllocationId);
    }

    [Fact]
    public async Task DrainingAndOfflineWorkers_AreNeverChosen()
    {
        await CreatePoolAsync("p", workers: 3, capacity: 5);
        (await Store.SetWorkerStateAsync("p", "w000", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.Ok);
        (await Store.SetWorkerStateAsync("p", "w001", WorkerState.Offline)).Should().Be(WorkerUpdateStatus.Ok);
        var outcomes = await Store.AllocateAsync("p", [.. Enumerable.Range(0, 6).Select(i => new AllocationRequest($"s{i}"))]);
        outcomes.Take(5).Should().OnlyContain(o => o.Allocation!.WorkerId == "w002");
        outcomes[5].Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task ReleaseAndRenew_FollowEpochs()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });
        var allocation = (await Store.AllocateAsync("p", [new AllocationRequest("s")]))[0].Allocation!;
        allocation.ExpiresAt.Should().BeCloseTo(allocation.CreatedAt + TimeSpan.FromMinutes(1), TimeSpan.FromSeconds(1));

        var renewed = await Store.RenewAsync("p", allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(5));
        renewed.Status.Should().Be(LeaseStatus.Ok);
        renewed.Allocation!.Epoch.Should().BeGreaterThan(allocation.Epoch);

        (await Store.ReleaseAsync("p", allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.StaleEpoch);
        (await Store.GetWorkerAsync("p", "w000"))!.Load.Should().Be(1);
        var released = await Store.ReleaseAsync("p", allocation.AllocationId, renewed.Allocation.Epoch);
        released.Status.Should().Be(LeaseStatus.Ok);
        released.Allocation!.IsActive.Should().BeFalse();
        (await Store.ReleaseAsync("p", allocation.AllocationId, renewed.Allocation.Epoch)).Status.Should().Be(LeaseStatus.NotActive);
        (await Store.ReleaseAsync("p", Guid.NewGuid(), 1)).Status.Should().Be(LeaseStatus.NotFound);
        (await Store.GetWorkerAsync("p", "w000"))!.Load.Should().Be(0);
    }

    [Fact]
    public async Task Registration_ReRegisterAdvancesEpoch_CapacityBelowLoadChangesNothing()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        await Store.AllocateAsync("p", [new AllocationRequest("a", 3)]);
        await Store.SetWorkerStateAsync("p", "w000", WorkerState.Draining);
        var before = (await Store.GetWorkerAsync("p", "w000"))!;

        var shrink = await Store.RegisterWorkersAsync("p", [new WorkerRegistration("w000", "new:1", 2)]);
        shrink[0].Status.Should().Be(RegistrationStatus.CapacityBelowLoad);
        (await Store.GetWorkerAsync("p", "w000")).Should().BeEquivalentTo(before);

        var update = await Store.RegisterWorkersAsync("p", [new WorkerRegistration("w000", "new:1", 3, ["x"]), new WorkerRegistration("w001", "n:1", 1)]);
        update[0].Status.Should().Be(RegistrationStatus.Updated);
        update[0].Worker.Epoch.Should().Be(before.Epoch + 1);
        update[0].Worker.State.Should().Be(WorkerState.Draining);
        update[0].Worker.Load.Should().Be(3);
        update[0].Worker.Tags.Should().Equal("x");
        update[1].Status.Should().Be(RegistrationStatus.Created);
        update[1].Worker.Epoch.Should().Be(1);
    }

    [Fact]
    public async Task Deregister_EndsAllocations_LaterReleaseIsNotActive()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        var allocation = (await Store.AllocateAsync("p", [new AllocationRequest("a", 2)]))[0].Allocation!;
        var result = await Store.DeregisterWorkerAsync("p", "w000");
        result.Should().Be(new DeregistrationResult(true, 1));
        (await Store.ReleaseAsync("p", allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.NotActive);
        (await Store.DeregisterWorkerAsync("p", "w000")).Found.Should().BeFalse();
    }

    [Fact]
    public async Task ReportLoad_WithStaleEpoch_ChangesNothing()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        (await Store.ReportLoadAsync("p", "w000", 7, 5000)).Should().Be(WorkerUpdateStatus.StaleEpoch);
        (await Store.ReportLoadAsync("p", "w000", 1, 5000)).Should().Be(WorkerUpdateStatus.Ok);
        (await Store.ReportLoadAsync("p", "nope", 1, 5000)).Should().Be(WorkerUpdateStatus.NotFound);
        (await Store.GetWorkerAsync("p", "w000"))!.Score.Should().Be(WorkerScore.Compute(0, 5, 5000));
    }

    [Fact]
    public async Task UnknownPool_ThrowsNotFound()
    {
        var act = () => Store.AllocateAsync("missing", [new AllocationRequest("s")]);
        (await act.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
        var register = () => Store.RegisterWorkersAsync("missing", [new WorkerRegistration("w", "a", 1)]);
        await register.Should().ThrowAsync<AllocatorException>();
    }

    [Fact]
    public async Task ScoreColumn_MatchesWorkerScore()
    {
        await Store.UpsertPoolAsync("p", PoolSettings.Default);
        await Store.RegisterWorkersAsync("p", [new WorkerRegistration("big", "a", 1_000_000), new WorkerRegistration("small", "b", 3)]);
        await PostgresTestDatabase.ExecuteAsync($"UPDATE \"{Schema}\".workers SET load = CASE WHEN worker_id = 'big' THEN 999999 ELSE 1 END, reported_load_index = 1");
        await using var command = PostgresTestDatabase.DataSource.CreateCommand($"SELECT worker_id, load, capacity, reported_load_index, score FROM \"{Schema}\".workers");
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            reader.GetInt64(4).Should().Be(WorkerScore.Compute(reader.GetInt32(1), reader.GetInt32(2), reader.GetInt32(3)));
        }
    }

    [Fact]
    public async Task Notifications_ArriveForReleaseAndSettings()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        var received = new System.Collections.Concurrent.ConcurrentQueue<PoolChanged>();
        var got = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = Store.Subscribe(c =>
        {
            received.Enqueue(c);
            if (c.Kind == PoolChangeKind.SettingsChanged)
            {
                got.TrySetResult();
            }
        });
        await Store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(5));
        var allocation = (await Store.AllocateAsync("p", [new AllocationRequest("s")]))[0].Allocation!;
        await Store.ReleaseAsync("p", allocation.AllocationId, allocation.Epoch);
        await Store.UpsertPoolAsync("p", new PoolSettings { Strategy = AllocationStrategy.Strict });
        await got.Task.WaitAsync(TimeSpan.FromSeconds(5));
        received.Should().Contain(new PoolChanged("p", PoolChangeKind.CapacityAvailable));
        received.Should().Contain(new PoolChanged("p", PoolChangeKind.SettingsChanged));
        (await Store.GetPoolAsync("p"))!.Settings.Strategy.Should().Be(AllocationStrategy.Strict);
    }

    [Fact]
    public async Task History_PastItsRetention_IsPurgedByTheReaper_AndTheKeyAllocatesAgain()
    {
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.HistoryRetention = TimeSpan.FromSeconds(1);
            o.ApplyMigrations = false;
        });
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        var first = (await store.AllocateAsync("p", [new AllocationRequest("s")]))[0].Allocation!;
        (await store.ReleaseAsync("p", first.AllocationId, first.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await store.AllocateAsync("p", [new AllocationRequest("s")]))[0].Status.Should().Be(AllocationStatus.Existing, "within the retention");
        await PostgresTestDatabase.ExecuteAsync($"UPDATE \"{Schema}\".allocation_history SET ended_at = ended_at - interval '2 seconds'");

        (await store.AllocateAsync("p", [new AllocationRequest("s")]))[0].Status.Should().Be(AllocationStatus.Allocated, "past the retention the key is free");
        (await store.GetAllocationAsync("p", first.AllocationId)).Should().NotBeNull("kept until the reaper purges it");
        await store.ReapExpiredAsync(10);
        (await store.GetAllocationAsync("p", first.AllocationId)).Should().BeNull("purged");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task StrictStrategy_AllocatesLeastLoaded()
    {
        await CreatePoolAsync("p", workers: 3, capacity: 2, new PoolSettings { Strategy = AllocationStrategy.Strict });
        var outcomes = await Store.AllocateAsync("p", [.. Enumerable.Range(0, 7).Select(i => new AllocationRequest($"s{i}"))]);
        outcomes.Take(6).Select(o => o.Allocation!.WorkerId).Should().Equal("w000", "w001", "w002", "w000", "w001", "w002");
        outcomes.Take(6).Should().OnlyContain(o => o.Decision.BlockingFallback);
        outcomes[6].Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task SerializedRegistrations_StillRegisterEveryWorker()
    {
        await Store.UpsertPoolAsync("p", new PoolSettings { SerializeRegistrations = true });
        var batches = Enumerable.Range(0, 4).Select(b => Store.RegisterWorkersAsync("p", [.. Enumerable.Range(0, 50).Select(i => new WorkerRegistration($"w{i:D3}", "a", 5 + b))])).ToList();
        await Task.WhenAll(batches).WaitAsync(TimeSpan.FromSeconds(30));
        (await Store.GetWorkersAsync("p")).Should().HaveCount(50).And.OnlyContain(w => w.Epoch == 4);
    }
}
