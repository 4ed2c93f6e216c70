using Allocator.Reliability.Checking;
using Allocator.Reliability.Cluster;
using Allocator.Reliability.History;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Npgsql;

namespace Allocator.Reliability.Tests;

/// <summary>A real store schema (the store's own migrations) the checker's tests write into, directly or through the store.</summary>
public sealed class CheckerDatabase : IAsyncLifetime
{
    private ServiceProvider _services = null!;

    public string Schema { get; } = "chk_" + Guid.NewGuid().ToString("N")[..10];

    public static string ConnectionString => Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES") is { Length: > 0 } value
        ? new NpgsqlConnectionStringBuilder(value) { Pooling = false }.ConnectionString
        : throw new InvalidOperationException("ALLOCATOR_POSTGRES is not set: start PostgreSQL with eng/postgres.sh (eng/test.sh does).");

    public IWorkerStore Store { get; private set; } = null!;

    public async Task InitializeAsync()
    {
        var services = new ServiceCollection();
        services.AddAllocatorPostgres(ConnectionString, o =>
        {
            o.Schema = Schema;
            o.ListenForChanges = false;
        });
        _services = services.BuildServiceProvider();
        foreach (var hosted in _services.GetServices<IHostedService>())
        {
            if (hosted is IHostedLifecycleService lifecycle)
            {
                await lifecycle.StartingAsync(CancellationToken.None);
            }

            await hosted.StartAsync(CancellationToken.None);
        }

        Store = _services.GetRequiredService<IWorkerStore>();
    }

    public async Task DisposeAsync()
    {
        await _services.DisposeAsync();
        await ExecuteAsync($"DROP SCHEMA IF EXISTS \"{Schema}\" CASCADE");
    }

    public async Task ExecuteAsync(string sql)
    {
        await using var connection = new NpgsqlConnection(ConnectionString);
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql.Replace("{schema}", $"\"{Schema}\"", StringComparison.Ordinal), connection);
        await command.ExecuteNonQueryAsync();
    }
}

/// <summary>
/// Each invariant the checker verifies, broken on purpose in a real schema (or in the history),
/// must be reported: a checker that cannot fail proves nothing. And a consistent run reports none.
/// </summary>
public sealed class CheckerTests(CheckerDatabase db) : IClassFixture<CheckerDatabase>
{
    private static readonly Timeouts Timeouts = Cluster.Timeouts.Scenario;
    private readonly string _pool = "chk-" + Guid.NewGuid().ToString("N")[..8];
    private long _ids;

    [Fact]
    public async Task ConsistentRun_NoViolation()
    {
        await SetUpAsync();
        var (op, allocation) = await AllocateAsync("k1");
        // Invoked before the release commits, as a broker's is: a time taken after it lagged the
        // commit by more than the checker's 50 ms tolerance on a busy machine (ci23), which reads
        // as a release nobody asked for.
        var releasing = Now;
        var released = await db.Store.ReleaseAsync(_pool, allocation.AllocationId, allocation.Epoch);
        released.Status.Should().Be(LeaseStatus.Ok);
        var release = Op(OperationKind.Release, Outcome.Ok, 204, key: "k1", id: allocation.AllocationId, epoch: allocation.Epoch, invoked: releasing);

        var report = await CheckAsync([op, release], impossible: true);

        report.Results.Where(r => r.Violations > 0).Should().BeEmpty();
        report.For(Invariant.RepliesCommitted).Checked.Should().Be(1);
        report.For(Invariant.Capacity).Checked.Should().Be(2);
    }

    [Fact]
    public async Task LoadOffByOne_IsACapacityViolation()
    {
        await SetUpAsync();
        var (op, _) = await AllocateAsync("k1", release: true);
        await db.ExecuteAsync($"UPDATE {{schema}}.workers SET load = load + 1 WHERE pool_id = '{_pool}' AND worker_id = 'w0'");

        (await CheckAsync([op])).For(Invariant.Capacity).Violations.Should().Be(1);
    }

    [Fact]
    public async Task ReplyWithoutRow_IsReported()
    {
        await SetUpAsync();
        var ghost = Op(OperationKind.Allocate, Outcome.Ok, 201, key: "ghost", allocation: new AllocationReply(Guid.NewGuid(), "w0", 1, 7, Now, null, true));

        (await CheckAsync([ghost])).For(Invariant.RepliesCommitted).Violations.Should().Be(1);
    }

    [Fact]
    public async Task TwoAllocationsForOneKey_AreReported()
    {
        await SetUpAsync();
        var (first, _) = await AllocateAsync("twice", release: true);
        var (second, _) = await AllocateAsync("twice", release: true); // after the release the store answers the ended one...
        second.Allocation!.AllocationId.Should().Be(first.Allocation!.AllocationId);
        // ...so forge a second row for the key, as a replay bug would leave it.
        await db.ExecuteAsync($"INSERT INTO {{schema}}.allocation_history SELECT gen_random_uuid(), pool_id, worker_id, address, session_key, units, epoch + 1, created_at, expires_at, ended_at, end_reason FROM {{schema}}.allocation_history WHERE pool_id = '{_pool}'");
        var forgedReply = Op(OperationKind.Allocate, Outcome.Ok, 200, key: "twice", allocation: first.Allocation with { AllocationId = Guid.NewGuid() });

        (await CheckAsync([first, second, forgedReply])).For(Invariant.OneAllocationPerKey).Violations.Should().Be(2, "two rows for the key, and two ids answered for it");
    }

    [Fact]
    public async Task AllocationAfterAConfirmedDrain_IsReported()
    {
        await SetUpAsync();
        var (op, allocation) = await AllocateAsync("late", release: true);
        var drain = Op(OperationKind.Drain, Outcome.Ok, 204, worker: allocation.WorkerId, invoked: allocation.CreatedAt.AddSeconds(-2), completed: allocation.CreatedAt.AddSeconds(-1));
        var undrain = Op(OperationKind.Undrain, Outcome.Ok, 204, worker: allocation.WorkerId, invoked: allocation.CreatedAt.AddSeconds(1), completed: allocation.CreatedAt.AddSeconds(2));

        (await CheckAsync([drain, op, undrain])).For(Invariant.EligibleWorkers).Violations.Should().Be(1);

        // Undrained before it was created: fine.
        var earlyUndrain = Op(OperationKind.Undrain, Outcome.Ok, 204, worker: allocation.WorkerId, invoked: allocation.CreatedAt.AddMilliseconds(-500), completed: allocation.CreatedAt.AddMilliseconds(-400));
        (await CheckAsync([drain, earlyUndrain, op])).For(Invariant.EligibleWorkers).Violations.Should().Be(0);
    }

    [Fact]
    public async Task StaleEpochAccepted_IsAFencingViolation()
    {
        await SetUpAsync();
        var register = Op(OperationKind.Register, Outcome.Ok, 200, worker: "w0", invoked: Now.AddSeconds(-2), completed: Now.AddSeconds(-2));
        register.WorkerEpoch = 5;
        var staleAccepted = Op(OperationKind.ReportLoad, Outcome.Ok, 204, worker: "w0", epoch: 4);
        var staleRefused = Op(OperationKind.ReportLoad, Outcome.Fail, 409, worker: "w0", epoch: 4, problem: "stale-epoch");
        var flagged = Op(OperationKind.ReportLoad, Outcome.Ok, 204, worker: "w1", epoch: 1, knownStale: true);

        var fencing = (await CheckAsync([register, staleAccepted, staleRefused, flagged])).For(Invariant.Fencing);

        fencing.Checked.Should().Be(3);
        fencing.Violations.Should().Be(2);
    }

    [Fact]
    public async Task TwoSuccessfulReleases_AndARenewAfterExpiry_AreReported()
    {
        await SetUpAsync();
        var (op, allocation) = await AllocateAsync("freed", release: true);
        var first = Op(OperationKind.Release, Outcome.Ok, 204, key: "freed", id: allocation.AllocationId, epoch: allocation.Epoch);
        var second = Op(OperationKind.Release, Outcome.Ok, 204, key: "freed", id: allocation.AllocationId, epoch: allocation.Epoch);
        op.Allocation = op.Allocation! with { ExpiresAt = op.CompletedAt.AddMilliseconds(100) };
        var renew = Op(OperationKind.Renew, Outcome.Ok, 200, key: "freed", id: allocation.AllocationId, epoch: allocation.Epoch, invoked: op.CompletedAt.AddSeconds(1));

        var freed = (await CheckAsync([op, first, second, renew])).For(Invariant.FreedOnce);

        freed.Violations.Should().Be(3, "released twice; renewed after the lease ran out; renewed after the allocation ended");
    }

    [Fact]
    public async Task ActiveAllocationAtTheEnd_IsStuck()
    {
        await SetUpAsync();
        var (op, _) = await AllocateAsync("forgotten");

        var report = await CheckAsync([op]);

        report.For(Invariant.NothingStuck).Violations.Should().Be(1);
        report.For(Invariant.NothingStuck).Samples.Single().Should().Contain("without a lease");
    }

    [Fact]
    public async Task AllocationMadeByACallAnsweredFailure_IsReported()
    {
        await SetUpAsync();
        var (ok, allocation) = await AllocateAsync("denied");
        var denied = Op(OperationKind.Allocate, Outcome.Fail, 409, key: "denied", problem: "no-capacity", invoked: ok.InvokedAt, completed: ok.CompletedAt);

        var report = await CheckAsync([denied]);

        report.For(Invariant.FailureMeansNothing).Violations.Should().Be(1);
        report.For(Invariant.NothingStuck).Samples.Single().Should().Contain("saw only failure");
        await db.Store.ReleaseAsync(_pool, allocation.AllocationId, allocation.Epoch);
    }

    [Fact]
    public async Task FalseNoCapacity_SlowReply_And500_AreReported()
    {
        await SetUpAsync();
        var noCapacity = Op(OperationKind.Allocate, Outcome.Fail, 409, key: "nc", problem: "no-capacity");
        var slow = Op(OperationKind.Allocate, Outcome.Ok, 201, key: "slow");
        slow.Duration = Timeouts.Request + TimeSpan.FromSeconds(5);
        var waited = Op(OperationKind.Allocate, Outcome.Fail, 409, key: "waited", problem: "no-capacity");
        waited.Duration = Timeouts.Request + TimeSpan.FromSeconds(5);
        var crashed = Op(OperationKind.Renew, Outcome.Unknown, 500, problem: "internal", id: Guid.NewGuid(), epoch: 1);
        var impatient = Op(OperationKind.Allocate, Outcome.Unknown, 0, key: "gave-up", problem: "client-timeout");
        impatient.ClientTimeout = true;
        impatient.Duration = TimeSpan.FromMilliseconds(60);

        var report = await CheckAsync([noCapacity, slow, waited, crashed, impatient], impossible: true);

        report.For(Invariant.NoFalseNoCapacity).Violations.Should().Be(2);
        report.For(Invariant.HttpTimeout).Violations.Should().Be(2, "both replies came 5 s after the HTTP timeout; the client that gave up after 60 ms is not judged");
        report.For(Invariant.No500).Violations.Should().Be(1);
    }

    [Fact]
    public async Task SlowReply_FromAnInstanceFrozenWhileItWasInFlight_IsNotJudgedByTheHttpTimeout_OthersAre()
    {
        await SetUpAsync();
        var pausedAt = Now;
        var frozen = Op(OperationKind.Allocate, Outcome.Unknown, 503, key: "frozen", problem: "outcome-unknown", invoked: pausedAt - TimeSpan.FromSeconds(1));
        frozen.Duration = Timeouts.Request + TimeSpan.FromSeconds(6);
        frozen.CompletedAt = frozen.InvokedAt + frozen.Duration;
        var later = Op(OperationKind.Allocate, Outcome.Unknown, 503, key: "later", problem: "outcome-unknown", invoked: pausedAt + TimeSpan.FromSeconds(1));
        later.Duration = Timeouts.Request + TimeSpan.FromSeconds(6);
        later.CompletedAt = later.InvokedAt + later.Duration;

        var report = await new Checker(CheckerDatabase.ConnectionString, db.Schema, Timeouts, TimeSpan.FromSeconds(1))
            .CheckAsync([frozen, later], [_pool], new Expectations { FrozenInFlight = op => op.InvokedAt < pausedAt && op.CompletedAt > pausedAt }, CancellationToken.None);

        report.For(Invariant.HttpTimeout).Violations.Should().Be(1, "the call sent after the pause began was the survivors' to answer in time");
        report.For(Invariant.HttpTimeout).Samples.Single().Should().Contain("key later");
    }

    [Fact]
    public async Task AllocationAnsweredActive_EndedByAReleaseNoBrokerSent_IsReported()
    {
        // Issue 20, #1: the grain released an allocation it took for abandoned after a retry with
        // the same key had been answered active with it.
        await SetUpAsync();
        var (op, allocation) = await AllocateAsync("retried");
        (await db.Store.ReleaseAsync(_pool, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok, "the service's own release");

        var report = await CheckAsync([op]);

        report.For(Invariant.HeldMeansHeld).Violations.Should().Be(1);
        report.For(Invariant.HeldMeansHeld).Samples.Single().Should().Contain("no broker release");

        var sent = Op(OperationKind.Release, Outcome.Unknown, 0, key: "retried", id: allocation.AllocationId, epoch: allocation.Epoch, invoked: op.CompletedAt, problem: "client-timeout");
        (await CheckAsync([op, sent])).For(Invariant.HeldMeansHeld).Violations.Should().Be(0, "a release the broker sent may have committed even if its answer was lost");
    }

    [Fact]
    public async Task BrokersReleaseRefusedAsNotActive_WhileItsLeaseRan_IsReported()
    {
        await SetUpAsync();
        var (op, allocation) = await AllocateAsync("held");
        op.Allocation = op.Allocation! with { ExpiresAt = Now.AddMinutes(5) };
        await db.Store.ReleaseAsync(_pool, allocation.AllocationId, allocation.Epoch);
        var refused = Op(OperationKind.Release, Outcome.Fail, 409, key: "held", id: allocation.AllocationId, epoch: allocation.Epoch, problem: "conflict", invoked: op.CompletedAt.AddMilliseconds(10));

        var report = await CheckAsync([op, refused]);

        report.For(Invariant.HeldMeansHeld).Violations.Should().Be(2, "ended by nobody's release, and the broker's own release refused");

        // After an earlier release whose outcome was unknown, "not active" is that release's doing.
        var lost = Op(OperationKind.Release, Outcome.Unknown, 503, key: "held", id: allocation.AllocationId, epoch: allocation.Epoch, problem: "outcome-unknown", invoked: op.CompletedAt.AddMilliseconds(5));
        (await CheckAsync([op, lost, refused])).For(Invariant.HeldMeansHeld).Violations.Should().Be(0);
    }

    private async Task SetUpAsync()
    {
        await db.Store.UpsertPoolAsync(_pool, new PoolSettings());
        await db.Store.RegisterWorkersAsync(_pool, [new WorkerRegistration("w0", "10.0.0.1:1", 4), new WorkerRegistration("w1", "10.0.0.2:1", 4)]);
    }

    /// <summary>Allocates through the store (a real row) and returns the client's view of it as an ok reply.</summary>
    private async Task<(Operation Op, Allocation Allocation)> AllocateAsync(string key, bool release = false)
    {
        var invoked = Now;
        // Owned by the tenant the history's operations carry (the harness's admin key), as through the service.
        var outcome = (await db.Store.AllocateAsync(_pool, [new AllocationRequest(key) { Owner = HostCluster.ApiKeyTenant }]))[0];
        var allocation = outcome.Allocation!;
        var op = Op(OperationKind.Allocate, Outcome.Ok, outcome.Status == AllocationStatus.Allocated ? 201 : 200, key: key, invoked: invoked,
            allocation: new AllocationReply(allocation.AllocationId, allocation.WorkerId, allocation.Units, allocation.Epoch, allocation.CreatedAt, allocation.ExpiresAt, allocation.IsActive));
        if (release && allocation.IsActive)
        {
            (await db.Store.ReleaseAsync(_pool, allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        }

        return (op, allocation);
    }

    private Operation Op(OperationKind kind, Outcome outcome, int status, string? key = null, string? worker = null, Guid? id = null, long? epoch = null,
        AllocationReply? allocation = null, string? problem = null, DateTimeOffset? invoked = null, DateTimeOffset? completed = null, bool knownStale = false)
    {
        var at = invoked ?? Now;
        return new Operation
        {
            Id = ++_ids,
            Client = "test",
            Instance = 0,
            Kind = kind,
            Pool = _pool,
            Key = key,
            WorkerId = worker,
            AllocationId = id,
            Epoch = epoch,
            KnownStale = knownStale,
            InvokedAt = at,
            CompletedAt = completed ?? at.AddMilliseconds(5),
            Duration = TimeSpan.FromMilliseconds(5),
            Outcome = outcome,
            Status = status,
            Problem = problem,
            Allocation = allocation,
        };
    }

    private Task<CheckReport> CheckAsync(IReadOnlyList<Operation> history, bool impossible = false) =>
        new Checker(CheckerDatabase.ConnectionString, db.Schema, Timeouts, TimeSpan.FromSeconds(1))
            .CheckAsync(history, [_pool], new Expectations { NoCapacityImpossible = impossible ? _ => true : null }, CancellationToken.None);

    private static DateTimeOffset Now => TimeProvider.System.GetUtcNow();
}
