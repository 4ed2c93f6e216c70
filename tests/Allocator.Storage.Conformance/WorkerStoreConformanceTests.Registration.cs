namespace Allocator.Storage.Conformance;

/// <summary>Registration, re-registration, worker states, load reports and deregistration.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Register_NewWorker_CreatedAvailableWithEpochOne()
    {
        var poolId = await CreatePoolAsync();

        var outcomes = await Store.RegisterWorkersAsync(poolId, [new WorkerRegistration("w-a", "10.0.0.1:7000", 8, ["linux", "gpu"])]);

        var outcome = outcomes.Should().ContainSingle().Subject;
        outcome.Status.Should().Be(RegistrationStatus.Created);
        var worker = await GetWorkerAsync(poolId, "w-a");
        outcome.Worker.Should().BeEquivalentTo(worker);
        worker.PoolId.Should().Be(poolId);
        worker.Address.Should().Be("10.0.0.1:7000");
        worker.Capacity.Should().Be(8);
        worker.Load.Should().Be(0);
        worker.State.Should().Be(WorkerState.Available);
        worker.Epoch.Should().Be(1);
        worker.Tags.Should().BeEquivalentTo("gpu", "linux");
        worker.ReportedLoadIndex.Should().BeNull();
    }

    [Fact]
    public async Task Register_Again_UpdatedWithNextEpochKeepingLoadAndAllocations()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 4, "old"));
        var allocation = await AllocateAsync(poolId, units: 3);

        var outcome = (await Store.RegisterWorkersAsync(poolId, [new WorkerRegistration("w-a", "moved.example:7001", 10, ["new"])])).Single();

        outcome.Status.Should().Be(RegistrationStatus.Updated);
        var worker = await GetWorkerAsync(poolId, "w-a");
        outcome.Worker.Should().BeEquivalentTo(worker);
        worker.Epoch.Should().Be(2);
        worker.Address.Should().Be("moved.example:7001");
        worker.Capacity.Should().Be(10);
        worker.Tags.Should().BeEquivalentTo("new");
        worker.Load.Should().Be(3, "the worker still hosts its sessions");
        (await Store.GetAllocationAsync(poolId, allocation.AllocationId))!.IsActive.Should().BeTrue();
        await AssertLoadsMatchAsync(poolId, [allocation]);
        (await Store.ReleaseAsync(poolId, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok, "allocation epochs are independent of registration epochs");
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task Register_CapacityBelowLoad_RejectedAndNothingChanged()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        var allocation = await AllocateAsync(poolId, units: 3);
        var before = await SnapshotAsync(poolId);

        var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 2)])).Single();

        outcome.Status.Should().Be(RegistrationStatus.CapacityBelowLoad);
        outcome.Worker.Capacity.Should().Be(5);
        outcome.Worker.Epoch.Should().Be(1);
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
        await AssertLoadsMatchAsync(poolId, [allocation]);
    }

    [Fact]
    public async Task Register_CapacityEqualToLoad_Accepted()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        await AllocateAsync(poolId, units: 3);

        var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 3)])).Single();

        outcome.Status.Should().Be(RegistrationStatus.Updated);
        outcome.Worker.Capacity.Should().Be(3);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity, "the worker is now full");
    }

    [Fact]
    public async Task Register_Batch_EachWorkerGetsItsOwnOutcome()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-b", 2), Registration("w-c", 4));
        await Store.SetWorkerStateAsync(poolId, "w-b", WorkerState.Draining);
        await AllocateAsync(poolId, units: 3);

        var outcomes = await Store.RegisterWorkersAsync(poolId, [Registration("w-c", 1), Registration("w-a", 3), Registration("w-b", 6)]);

        outcomes.Should().HaveCount(3);
        outcomes.ToDictionary(o => o.WorkerId, o => o.Status).Should().BeEquivalentTo(new Dictionary<string, RegistrationStatus>
        {
            ["w-a"] = RegistrationStatus.Created,
            ["w-b"] = RegistrationStatus.Updated,
            ["w-c"] = RegistrationStatus.CapacityBelowLoad,
        });
        (await Store.GetWorkersAsync(poolId)).Select(w => (w.WorkerId, w.Capacity, w.Epoch)).Should().Equal(("w-a", 3, 1L), ("w-b", 6, 2L), ("w-c", 4, 1L));
    }

    [Fact]
    public async Task Register_DrainingWorker_StaysDraining()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        (await Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.Ok);

        var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)])).Single();

        outcome.Status.Should().Be(RegistrationStatus.Updated);
        (await GetWorkerAsync(poolId, "w-a")).State.Should().Be(WorkerState.Draining, "only undrain ends a drain");
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);
    }

    [Fact]
    public async Task Register_OfflineWorker_BecomesAvailable()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        (await Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Offline)).Should().Be(WorkerUpdateStatus.Ok);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity);

        var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)])).Single();

        outcome.Status.Should().Be(RegistrationStatus.Updated);
        (await GetWorkerAsync(poolId, "w-a")).State.Should().Be(WorkerState.Available);
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-a");
    }

    [Fact]
    public async Task Drain_WorkerKeepsItsAllocationsAndTheyCanBeReleased()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5), Registration("w-b", 5));
        var onA = await AllocateAsync(poolId);
        onA.WorkerId.Should().Be("w-a");

        (await Store.SetWorkerStateAsync(poolId, "w-a", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.Ok);

        (await Store.GetAllocationAsync(poolId, onA.AllocationId))!.IsActive.Should().BeTrue("draining keeps existing allocations");
        (await AllocateWorkerIdAsync(poolId)).Should().Be("w-b");
        (await Store.ReleaseAsync(poolId, onA.AllocationId, onA.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await GetWorkerAsync(poolId, "w-a")).Load.Should().Be(0);
    }

    [Fact]
    public async Task SetWorkerState_UnknownWorker_ReturnsNotFound()
    {
        var poolId = await CreatePoolAsync();

        (await Store.SetWorkerStateAsync(poolId, "w-missing", WorkerState.Draining)).Should().Be(WorkerUpdateStatus.NotFound);
        (await Store.GetWorkerAsync(poolId, "w-missing")).Should().BeNull();
    }

    [Fact]
    public async Task Deregister_WorkerWithLiveAllocations_EndsThemAndRemovesTheWorker()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5), Registration("w-b", 1));
        var first = await AllocateAsync(poolId);
        var onB = await AllocateAsync(poolId);
        var second = await AllocateAsync(poolId, units: 2);
        first.WorkerId.Should().Be("w-a");
        onB.WorkerId.Should().Be("w-b");
        second.WorkerId.Should().Be("w-a");

        var result = await Store.DeregisterWorkerAsync(poolId, "w-a");

        result.Should().Be(new DeregistrationResult(Found: true, AllocationsEnded: 2));
        (await Store.GetWorkerAsync(poolId, "w-a")).Should().BeNull();
        (await Store.GetWorkersAsync(poolId)).Select(w => w.WorkerId).Should().Equal("w-b");
        (await Store.GetAllocationAsync(poolId, first.AllocationId))!.IsActive.Should().BeFalse();
        (await Store.ReleaseAsync(poolId, first.AllocationId, first.Epoch)).Status.Should().Be(LeaseStatus.NotActive);
        (await Store.RenewAsync(poolId, second.AllocationId, second.Epoch, TimeSpan.FromMinutes(1))).Status.Should().Be(LeaseStatus.NotActive);
        await AssertLoadsMatchAsync(poolId, [onB]);
        (await AllocateOneAsync(poolId, Request())).Status.Should().Be(AllocationStatus.NoCapacity, "a deregistered worker is never chosen");
        var replay = await AllocateOneAsync(poolId, Request(sessionKey: first.SessionKey));
        replay.Status.Should().Be(AllocationStatus.Existing, "a replay answers the key's ended allocation (retention window), never a new one");
        replay.Allocation!.IsActive.Should().BeFalse();
    }

    [Fact]
    public async Task Deregister_UnknownWorker_NotFound()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 1);

        (await Store.DeregisterWorkerAsync(poolId, "w-missing")).Should().Be(new DeregistrationResult(Found: false, AllocationsEnded: 0));
        (await Store.GetWorkersAsync(poolId)).Should().ContainSingle();
    }

    [Fact]
    public async Task Deregister_ThenRegisterAgain_StartsFreshAtEpochOne()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        await AllocateAsync(poolId, units: 2);
        await Store.DeregisterWorkerAsync(poolId, "w-a");

        var outcome = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)])).Single();

        outcome.Status.Should().Be(RegistrationStatus.Created);
        outcome.Worker.Epoch.Should().Be(1);
        outcome.Worker.Load.Should().Be(0, "the old allocations ended with the old registration");
        await AssertLoadsMatchAsync(poolId, []);
    }

    [Fact]
    public async Task ReportLoad_CurrentEpoch_RecordsIndexAndHeartbeat()
    {
        var poolId = await CreatePoolAsync();
        var registered = (await RegisterAsync(poolId, Registration("w-a", 5))).Single().Worker;

        (await Store.ReportLoadAsync(poolId, "w-a", registered.Epoch, loadIndex: 1_234)).Should().Be(WorkerUpdateStatus.Ok);
        (await Store.ReportLoadAsync(poolId, "w-a", registered.Epoch, loadIndex: null)).Should().Be(WorkerUpdateStatus.Ok);

        var worker = await GetWorkerAsync(poolId, "w-a");
        worker.ReportedLoadIndex.Should().Be(1_234, "a heartbeat without an index keeps the last one");
        worker.LastHeartbeat.Should().BeOnOrAfter(registered.LastHeartbeat);
        worker.Score.Should().Be(1_234 * WorkerScore.PerLoadIndexPoint);
    }

    [Fact]
    public async Task ReportLoad_StaleEpoch_ReturnsStaleEpochAndChangesNothing()
    {
        var poolId = await CreatePoolAsync();
        var first = (await RegisterAsync(poolId, Registration("w-a", 5))).Single().Worker;
        var second = (await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)])).Single().Worker;
        second.Epoch.Should().Be(first.Epoch + 1);
        var before = await SnapshotAsync(poolId);

        var status = await Store.ReportLoadAsync(poolId, "w-a", first.Epoch, loadIndex: 9_000);

        status.Should().Be(WorkerUpdateStatus.StaleEpoch);
        (await SnapshotAsync(poolId)).Should().BeEquivalentTo(before);
        (await GetWorkerAsync(poolId, "w-a")).ReportedLoadIndex.Should().BeNull();
    }

    [Fact]
    public async Task ReportLoad_UnknownWorker_ReturnsNotFound()
    {
        var poolId = await CreatePoolAsync();

        (await Store.ReportLoadAsync(poolId, "w-missing", 1, loadIndex: 10)).Should().Be(WorkerUpdateStatus.NotFound);
    }
}
