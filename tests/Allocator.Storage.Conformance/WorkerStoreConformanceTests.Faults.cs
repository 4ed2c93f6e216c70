namespace Allocator.Storage.Conformance;

/// <summary>Defects of issue 12 that every store must not have (each test failed on PostgreSQL before its fix).</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Register_AfterDeregistration_ContinuesTheEpoch_SoAStaleReportIsRefused()
    {
        var poolId = await CreatePoolAsync();
        await RegisterAsync(poolId, Registration("w-a", 5));
        var second = EpochOf(await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)]), "w-a");
        second.Should().Be(2);
        (await Store.DeregisterWorkerAsync(poolId, "w-a")).Found.Should().BeTrue();

        var again = EpochOf(await Store.RegisterWorkersAsync(poolId, [Registration("w-a", 5)]), "w-a");

        again.Should().BeGreaterThan(second, "an epoch never repeats for a worker id, also across deregistration (#4)");
        (await Store.ReportLoadAsync(poolId, "w-a", 1, 10)).Should().Be(WorkerUpdateStatus.StaleEpoch, "a report from the first registration");
        (await Store.ReportLoadAsync(poolId, "w-a", second, 10)).Should().Be(WorkerUpdateStatus.StaleEpoch, "a report from before the deregistration");
        (await Store.ReportLoadAsync(poolId, "w-a", again, 10)).Should().Be(WorkerUpdateStatus.Ok);
    }

    [Fact]
    public async Task Renew_AfterExpiry_IsRefused_EvenBeforeTheReaperRuns()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, allocation.AllocationId);

        var renew = await Store.RenewAsync(poolId, allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(5));

        renew.Status.Should().Be(LeaseStatus.NotActive, "expiry is decided by the database clock at the statement, not by the reaper's schedule (#5)");
    }

    [Fact]
    public async Task Allocate_OnlySlotHeldByAnExpiredLease_Allocates()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 1);
        var expired = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, expired.AllocationId);

        var outcome = await AllocateOneAsync(poolId, Request());

        outcome.Status.Should().Be(AllocationStatus.Allocated, "an expired lease holds no capacity (#5)");
        (await Store.GetAllocationAsync(poolId, expired.AllocationId))!.IsActive.Should().BeFalse();
        await AssertLoadsMatchAsync(poolId, [outcome.Allocation!]);
    }

    [Fact]
    public async Task Allocate_ReplayOfAnExpiredLease_DoesNotAnswerItAsLive()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var allocation = await AllocateAsync(poolId, lease: TimeSpan.FromMinutes(5));
        await ExpireLeaseAsync(poolId, allocation.AllocationId);

        var replay = await AllocateOneAsync(poolId, Request(sessionKey: allocation.SessionKey));

        replay.Status.Should().Be(AllocationStatus.Existing);
        replay.Allocation!.AllocationId.Should().Be(allocation.AllocationId);
        replay.Allocation.IsActive.Should().BeFalse("an expired allocation is not returned as live (#5)");
    }
}
