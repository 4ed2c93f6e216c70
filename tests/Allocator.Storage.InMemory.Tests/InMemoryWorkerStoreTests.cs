using Allocator.Storage.InMemory;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Storage.InMemory.Tests;

/// <summary>
/// What only the in-memory store can show: decision details, its lock timeout, and time-driven
/// behaviour under a clock the test controls. Shared semantics live in the conformance suite.
/// </summary>
public sealed class InMemoryWorkerStoreTests
{
    private const string PoolId = "pool-1";
    private static readonly DateTimeOffset Start = new(2026, 1, 1, 12, 0, 0, TimeSpan.Zero);

    // The store's clock for leases and heartbeats: it moves only when a test advances it. The
    // tests of lock waits run on the system clock instead (lock timeouts and the retry jitter are
    // waits measured on the store's clock, which a fake one would never let expire).
    private readonly FakeTimeProvider _clock = new(Start);

    [Fact]
    public async Task Allocate_LeastLoadedRowLocked_DecisionReportsTheSkip()
    {
        var store = await CreateAsync(workers: 3);

        await using (await store.HoldRowLockAsync(PoolId, "w-0"))
        {
            var outcome = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1")])).Single();

            outcome.Allocation!.WorkerId.Should().Be("w-1");
            outcome.Decision.Should().Be(new AllocationDecision(Rank: 1, ExcessScore: 0, RowsSkipped: 1, BlockingFallback: false, Retries: 0));
        }
    }

    [Fact]
    public async Task Allocate_EveryRowLocked_DecisionReportsRetriesAndBlockingFallback()
    {
        // Without jitter every retry runs synchronously, so when AllocateAsync returns its task the
        // call is already waiting for the row lock: no timing involved.
        var store = await CreateAsync(workers: 1, new InMemoryWorkerStoreOptions { SkipRetries = 2, RetryJitter = TimeSpan.Zero });
        var rowLock = await store.HoldRowLockAsync(PoolId, "w-0");

        var allocation = store.AllocateAsync(PoolId, [new AllocationRequest("s-1")]);
        allocation.IsCompleted.Should().BeFalse("the only row is locked");
        await rowLock.DisposeAsync();

        var outcome = (await allocation.WaitAsync(TimeSpan.FromSeconds(10))).Single();
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        outcome.Decision.BlockingFallback.Should().BeTrue();
        outcome.Decision.Retries.Should().Be(2);
    }

    [Fact]
    public async Task Allocate_LockHeldPastLockTimeout_AnswersUnavailableAndWritesNothing()
    {
        var store = await CreateAsync(workers: 1, new InMemoryWorkerStoreOptions { LockTimeout = TimeSpan.FromMilliseconds(200) }, TimeProvider.System);

        await using (await store.HoldRowLockAsync(PoolId, "w-0"))
        {
            var outcome = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1")]).WaitAsync(TimeSpan.FromSeconds(10))).Single();

            outcome.Status.Should().Be(AllocationStatus.Unavailable);
            outcome.Allocation.Should().BeNull();
        }

        var statistics = await store.GetPoolStatisticsAsync(PoolId);
        statistics.Load.Should().Be(0);
        statistics.ActiveAllocations.Should().Be(0);
    }

    [Fact]
    public async Task Allocate_OneRequestTimesOutInBatch_OthersStayAllocatedAndReported()
    {
        var store = await CreateAsync(workers: 2, new InMemoryWorkerStoreOptions { LockTimeout = TimeSpan.FromMilliseconds(200) }, TimeProvider.System);
        await store.RegisterWorkersAsync(PoolId, [new WorkerRegistration("w-1", "10.0.0.2", 4, ["gpu"])]);

        await using (await store.HoldRowLockAsync(PoolId, "w-1"))
        {
            var outcomes = await store.AllocateAsync(PoolId, [new AllocationRequest("plain"), new AllocationRequest("tagged", RequiredTags: ["gpu"])])
                .WaitAsync(TimeSpan.FromSeconds(10));

            outcomes[0].Status.Should().Be(AllocationStatus.Allocated, "the committed part of a batch must be reported, not thrown away");
            outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        }

        (await store.GetPoolStatisticsAsync(PoolId)).ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task Allocate_Lease_TimesComeFromTheInjectedClock()
    {
        var store = await CreateAsync(workers: 1);

        var allocation = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1", Lease: TimeSpan.FromMinutes(1))])).Single().Allocation!;

        allocation.CreatedAt.Should().Be(Start);
        allocation.ExpiresAt.Should().Be(Start.AddMinutes(1));
    }

    [Fact]
    public async Task ReapExpired_LeaseRunsOut_ReapedOnlyAfterExpiry()
    {
        var store = await CreateAsync(workers: 1);
        var allocation = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1", Lease: TimeSpan.FromMinutes(1))])).Single().Allocation!;

        _clock.Advance(TimeSpan.FromSeconds(59));
        (await store.ReapExpiredAsync(10)).Should().BeEmpty("the lease has a second left");

        _clock.Advance(TimeSpan.FromSeconds(2));
        var reaped = (await store.ReapExpiredAsync(10)).Should().ContainSingle().Subject;
        reaped.AllocationId.Should().Be(allocation.AllocationId);
        reaped.EndedAt.Should().Be(Start.AddSeconds(60), "it ended when its lease expired (issue 20, #5), not when the reaper came");
        (await store.GetWorkerAsync(PoolId, "w-0"))!.Load.Should().Be(0);
    }

    [Fact]
    public async Task Renew_ExtendsFromNowOnTheInjectedClock()
    {
        var store = await CreateAsync(workers: 1);
        var allocation = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1", Lease: TimeSpan.FromMinutes(1))])).Single().Allocation!;
        _clock.Advance(TimeSpan.FromSeconds(50));

        var renewed = (await store.RenewAsync(PoolId, allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(1))).Allocation!;

        renewed.ExpiresAt.Should().Be(Start.AddSeconds(110));
        _clock.Advance(TimeSpan.FromSeconds(30));
        (await store.ReapExpiredAsync(10)).Should().BeEmpty("the renewal moved the expiry");
    }

    [Fact]
    public async Task ExpireLease_TestHook_MakesTheLeaseReapable()
    {
        var store = await CreateAsync(workers: 1);
        var allocation = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1", Lease: TimeSpan.FromHours(1))])).Single().Allocation!;

        store.ExpireLease(PoolId, allocation.AllocationId);

        (await store.ReapExpiredAsync(10)).Should().ContainSingle().Which.AllocationId.Should().Be(allocation.AllocationId);
    }

    [Fact]
    public async Task ExpiredLease_ReadsAsEndedAtItsExpiry_BeforeTheReaperRuns()
    {
        var store = await CreateAsync(workers: 1);
        var allocation = (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1", Lease: TimeSpan.FromMinutes(1))])).Single().Allocation!;
        _clock.Advance(TimeSpan.FromMinutes(2));

        var expired = (await store.GetAllocationAsync(PoolId, allocation.AllocationId))!;

        expired.IsActive.Should().BeFalse("a lease is over at its expiry, reaped or not (issue 20, #5)");
        expired.EndedAt.Should().Be(Start.AddMinutes(1));
    }

    [Fact]
    public async Task Allocate_HeartbeatTimeout_StaleWorkersIneligibleUntilTheyReport()
    {
        var store = new InMemoryWorkerStore(_clock);
        await store.UpsertPoolAsync(PoolId, new PoolSettings { HeartbeatTimeout = TimeSpan.FromSeconds(10) });
        var outcomes = await store.RegisterWorkersAsync(PoolId, [new WorkerRegistration("w-0", "a", 5), new WorkerRegistration("w-1", "b", 5)]);

        _clock.Advance(TimeSpan.FromSeconds(10));
        (await store.AllocateAsync(PoolId, [new AllocationRequest("s-1")])).Single().Allocation!.WorkerId.Should().Be("w-0", "a heartbeat exactly at the timeout is still fresh");

        _clock.Advance(TimeSpan.FromSeconds(1));
        (await store.AllocateAsync(PoolId, [new AllocationRequest("s-2")])).Single().Status.Should().Be(AllocationStatus.NoCapacity, "both heartbeats are stale");

        (await store.ReportLoadAsync(PoolId, "w-1", outcomes[1].Worker.Epoch, loadIndex: null)).Should().Be(WorkerUpdateStatus.Ok);
        (await store.AllocateAsync(PoolId, [new AllocationRequest("s-3")])).Single().Allocation!.WorkerId.Should().Be("w-1");
    }

    [Fact]
    public async Task Replay_WithinTheRetention_AnswersTheEndedAllocation_AfterIt_AllocatesAgain_AndTheReaperForgetsIt()
    {
        var store = await CreateAsync(workers: 1, new InMemoryWorkerStoreOptions { HistoryRetention = TimeSpan.FromMinutes(10) });
        var first = (await store.AllocateAsync(PoolId, [new AllocationRequest("s")])).Single().Allocation!;
        await store.ReleaseAsync(PoolId, first.AllocationId, first.Epoch);

        _clock.Advance(TimeSpan.FromMinutes(10) - TimeSpan.FromTicks(1));
        (await store.AllocateAsync(PoolId, [new AllocationRequest("s")])).Single().Allocation!.AllocationId.Should().Be(first.AllocationId, "still within the retention");

        _clock.Advance(TimeSpan.FromTicks(1));
        var again = (await store.AllocateAsync(PoolId, [new AllocationRequest("s")])).Single();
        again.Status.Should().Be(AllocationStatus.Allocated, "the key's outcome is kept for the retention only");
        (await store.GetAllocationAsync(PoolId, first.AllocationId)).Should().NotBeNull("not reaped yet");

        _clock.Advance(TimeSpan.FromTicks(1));
        await store.ReapExpiredAsync(10);
        (await store.GetAllocationAsync(PoolId, first.AllocationId)).Should().BeNull("the reaper purges the history past its retention");
        (await store.GetAllocationAsync(PoolId, again.Allocation!.AllocationId)).Should().NotBeNull("active allocations are never purged");
    }

    private async Task<InMemoryWorkerStore> CreateAsync(int workers, InMemoryWorkerStoreOptions? options = null, TimeProvider? time = null)
    {
        var store = new InMemoryWorkerStore(time ?? _clock, options);
        await store.UpsertPoolAsync(PoolId, PoolSettings.Default);
        await store.RegisterWorkersAsync(PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w-{i}", $"10.0.0.{i}:7000", 10))]);
        return store;
    }
}
