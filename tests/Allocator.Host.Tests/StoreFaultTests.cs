using System.Net;
using Allocator.Client;
using Allocator.Storage.InMemory;
using Allocator.Testing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;

namespace Allocator.Host.Tests;

/// <summary>Store failures reach callers as 503/504 problems, never 500; uses the fixture's store hook.</summary>
public sealed class StoreFaultTests
{
    [Fact]
    public async Task StoreUnavailable_Is503_AndSlowStore_Is504()
    {
        var memory = new InMemoryWorkerStore();
        var store = new FaultyStore(memory);
        await using var host = await TestHost.StartAsync(
            [
                "--Allocator:Timeouts:LockTimeout=00:00:00.100",
                "--Allocator:Timeouts:CommandTimeout=00:00:00.500",
                "--Allocator:Timeouts:GrainCallTimeout=00:00:01",
                "--Allocator:Timeouts:RequestTimeout=00:00:01.500",
            ],
            builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        var pool = Unique.Name("faults");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 5));

        store.FailAllocations = true;
        var unavailable = await FluentActions.Awaiting(() => host.Broker.AllocateAsync(pool, new AllocateRequest(), "f1"))
            .Should().ThrowAsync<AllocatorApiException>();
        unavailable.Which.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable);
        unavailable.Which.Type.Should().Be(ProblemTypes.Unavailable);
        unavailable.Which.RetryAfter.Should().NotBeNull("every 503 says when to retry");

        store.OutcomeUnknown = true;
        var unknown = await FluentActions.Awaiting(() => host.Broker.AllocateAsync(pool, new AllocateRequest(), "f1b"))
            .Should().ThrowAsync<AllocatorApiException>();
        unknown.Which.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, "a dropped connection is 503, never 500");
        unknown.Which.Type.Should().EndWith("/outcome-unknown", "the caller must retry with the same key, not assume nothing was written");
        unknown.Which.RetryAfter.Should().NotBeNull();
        store.OutcomeUnknown = false;

        store.FailAllocations = false;
        store.Delay = TimeSpan.FromSeconds(4);
        var slowAllocate = await FluentActions.Awaiting(() => host.Broker.AllocateAsync(pool, new AllocateRequest(), "f2"))
            .Should().ThrowAsync<AllocatorApiException>();
        slowAllocate.Which.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, "the grain call timeout fires before the request timeout");
        slowAllocate.Which.Type.Should().EndWith("/outcome-unknown", "its batch was in the store when its deadline passed: it may still commit (the grain releases it if the batch reports it)");

        var slowStats = await FluentActions.Awaiting(() => host.Broker.GetPoolAsync(pool))
            .Should().ThrowAsync<AllocatorApiException>();
        slowStats.Which.StatusCode.Should().Be(HttpStatusCode.GatewayTimeout);
        slowStats.Which.Type.Should().Be(ProblemTypes.Timeout);
    }

    [Fact]
    public async Task StoreUnavailable_IsLoggedAsAWarning_NotAsAnUnexpectedError()
    {
        var memory = new InMemoryWorkerStore();
        var store = new FaultyStore(memory);
        var logs = new FakeLogCollector();
        await using var host = await TestHost.StartAsync(null, builder =>
        {
            builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory);
            builder.Services.AddSingleton(logs);
            builder.Logging.AddProvider(new FakeLoggerProvider(logs));
        });
        var pool = Unique.Name("fault-logs");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 5));

        store.FailAllocations = true;
        store.OutcomeUnknown = true;
        await FluentActions.Awaiting(() => host.Broker.AllocateAsync(pool, new AllocateRequest(), "logged")).Should().ThrowAsync<AllocatorApiException>();

        var problems = logs.GetSnapshot().Where(r => r.Category == typeof(Api.ProblemMiddleware).FullName).ToList();
        problems.Should().ContainSingle(r => r.Level == LogLevel.Warning && r.Message.Contains("503", StringComparison.Ordinal),
            "an outage answered 503 is an operational warning");
        problems.Should().NotContain(r => r.Level >= LogLevel.Error, "errors are kept for 500s, which are bugs");
    }

    [Fact]
    public async Task ReleaseOutlivingTheGrainCallTimeout_Is503OutcomeUnknown_NotATimeout()
    {
        var memory = new InMemoryWorkerStore();
        var store = new FaultyStore(memory);
        await using var host = await TestHost.StartAsync(
            [
                "--Allocator:Timeouts:LockTimeout=00:00:00.100",
                "--Allocator:Timeouts:CommandTimeout=00:00:00.500",
                "--Allocator:Timeouts:GrainCallTimeout=00:00:01",
                "--Allocator:Timeouts:RequestTimeout=00:00:03",
            ],
            builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        var pool = Unique.Name("slow-release");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 5));
        var held = (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "slow")).Allocation!;

        store.Delay = TimeSpan.FromSeconds(2);
        store.SlowReleases = true;
        using var http = host.NewHttp(TestHost.BrokerKey);
        using var response = await http.DeleteAsync($"v1/pools/{pool}/allocations/{held.AllocationId}?epoch={held.Epoch}");

        // The release batch may still commit after the grain call gave up: its outcome is unknown,
        // and a 503 tells clients (the .NET client included) to repeat it.
        response.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, await response.Content.ReadAsStringAsync());
        response.Headers.RetryAfter.Should().NotBeNull();
        await AuthTests.ExpectProblemAsync(response, "https://allocator.dev/problems/outcome-unknown");
    }

    [Fact]
    public async Task Readiness_StoreThatHangsPastItsCancellation_IsUnhealthyWithinTheCommandTimeout()
    {
        var memory = new InMemoryWorkerStore();
        var store = new FaultyStore(memory);
        await using var host = await TestHost.StartAsync(
            [
                "--Allocator:Timeouts:LockTimeout=00:00:00.100",
                "--Allocator:Timeouts:CommandTimeout=00:00:00.500",
                "--Allocator:Timeouts:GrainCallTimeout=00:00:01",
                "--Allocator:Timeouts:RequestTimeout=00:00:20",
            ],
            builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        using var http = host.NewHttp(null);
        (await http.GetAsync("health/ready")).StatusCode.Should().Be(HttpStatusCode.OK);

        // A network partition: the read neither answers nor honours its cancellation for 15 s.
        var hang = TimeSpan.FromSeconds(15);
        store.Delay = hang;
        store.HangingReads = true;
        using var lateness = SchedulingDelay.Start();
        var clock = System.Diagnostics.Stopwatch.StartNew();
        using var response = await http.GetAsync("health/ready");
        var took = clock.Elapsed;

        response.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, "a store that does not answer within a command's time is not ready");

        // The promise: readiness answers within the command timeout (0.5 s). Two seconds for the
        // request's own way, plus what the machine kept this process waiting; a readiness check
        // that waited for the read would take the whole hang.
        took.Should().BeLessThan(
            lateness.Bound(promise: TimeSpan.FromSeconds(0.5), allowance: TimeSpan.FromSeconds(2), defect: hang),
            "readiness must not wait for a hung read (it answered after {0}; {1})", took, lateness);
    }

    [Fact]
    public async Task DriverErrorLeakedByTheStore_Is503OutcomeUnknown_Never500()
    {
        var memory = new InMemoryWorkerStore();
        var store = new FaultyStore(memory);
        await using var host = await TestHost.StartAsync(null, builder => builder.Services.AddSingleton<IWorkerStore>(store).AddSingleton<IPoolChangeFeed>(memory));
        var pool = Unique.Name("leak");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 5));
        var held = (await host.Broker.AllocateAsync(pool, new AllocateRequest { LeaseSeconds = 60 }, "leak")).Allocation!;

        store.LeakDriverErrors = true;
        using var http = host.NewHttp(TestHost.BrokerKey);
        using var response = await http.PostAsync($"v1/pools/{pool}/allocations/{held.AllocationId}/renew",
            new StringContent($"{{\"epoch\":{held.Epoch}}}", System.Text.Encoding.UTF8, "application/json"));

        response.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable, await response.Content.ReadAsStringAsync());
        response.Headers.RetryAfter.Should().NotBeNull();
        await AuthTests.ExpectProblemAsync(response, "https://allocator.dev/problems/outcome-unknown");
    }

    [Fact]
    public async Task ExpiredLease_IsReaped()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:Storage:ReapInterval=00:00:00.100"]);
        var pool = Unique.Name("reap");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        await host.Admin.RegisterWorkerAsync(pool, "w1", new Client.WorkerRegistration("a:1", 1));
        var allocation = (await host.Broker.AllocateAsync(pool, new AllocateRequest { LeaseSeconds = 1 }, "short")).Allocation!;

        // The reaper runs every 100 ms; the defect this guards is a lease never reaped, so the
        // limit is only how long to wait for it (generous for a busy machine).
        var waited = System.Diagnostics.Stopwatch.StartNew();
        while ((await host.Broker.GetAllocationAsync(pool, allocation.AllocationId)).Active)
        {
            waited.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(30), "a 1 s lease reaped every 100 ms should be reaped well within 30 s");
            await Task.Delay(50);
        }

        (await host.Broker.GetPoolAsync(pool)).Load.Should().Be(0);
    }

    internal sealed class FaultyStore(IWorkerStore inner) : IWorkerStore
    {
        public volatile bool FailAllocations;

        /// <summary>Releases commit, then the store reports them unavailable (an outcome the caller cannot know).</summary>
        public volatile bool FailReleasesAfterCommit;
        public volatile bool OutcomeUnknown;

        /// <summary>Release batches take <see cref="Delay"/> before they reach the store.</summary>
        public volatile bool SlowReleases;

        public TimeSpan Delay { get; set; }

        public string Name => inner.Name;

        /// <summary>The inner store's, unless the test says otherwise.</summary>
        public int? ConnectionLimit { get; init; } = inner.ConnectionLimit;

        private async Task SlowAsync(CancellationToken ct)
        {
            if (Delay > TimeSpan.Zero)
            {
                await Task.Delay(Delay, ct);
            }
        }

        /// <summary>Awaited before a pool is created or updated, with the pool's id (a test's gate).</summary>
        public Func<string, Task>? BeforeUpsert { get; init; }

        public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, Allocator.PoolSettings settings, CancellationToken cancellationToken = default)
        {
            if (BeforeUpsert is { } before)
            {
                await before(poolId);
            }

            return await inner.UpsertPoolAsync(poolId, settings, cancellationToken);
        }

        /// <summary>Reads of a pool hang for <see cref="Delay"/> whatever the caller's token says, as a read on a black-holed connection does.</summary>
        public volatile bool HangingReads;

        public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
        {
            if (HangingReads)
            {
                await Task.Delay(Delay, CancellationToken.None);
            }

            return await inner.GetPoolAsync(poolId, cancellationToken);
        }

        public int StatisticsReads;

        public async Task<Allocator.PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default)
        {
            Interlocked.Increment(ref StatisticsReads);
            await SlowAsync(cancellationToken);
            return await inner.GetPoolStatisticsAsync(poolId, cancellationToken);
        }

        public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<Allocator.WorkerRegistration> workers, CancellationToken cancellationToken = default) => inner.RegisterWorkersAsync(poolId, workers, cancellationToken);

        public Task<Allocator.DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.DeregisterWorkerAsync(poolId, workerId, cancellationToken);

        public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) => inner.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);

        public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) => inner.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);

        public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.GetWorkerAsync(poolId, workerId, cancellationToken);

        public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetWorkersAsync(poolId, cancellationToken);

        public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default)
        {
            if (FailAllocations)
            {
                throw new AllocatorException(AllocatorErrorKind.Unavailable, "Injected: lock timeout after retries.", OutcomeUnknown, innerException: null);
            }

            await SlowAsync(cancellationToken);
            return await inner.AllocateAsync(poolId, requests, cancellationToken);
        }

        public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) => inner.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

        public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
        {
            if (SlowReleases)
            {
                await Task.Delay(Delay, CancellationToken.None); // a batch in the store past the grain call timeout
            }

            var results = await inner.ReleaseAsync(poolId, releases, cancellationToken);
            if (FailReleasesAfterCommit)
            {
                FailReleasesAfterCommit = false;
                throw new AllocatorException(AllocatorErrorKind.Unavailable, "Injected: the connection dropped after the commit.");
            }

            return results;
        }

        public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) => inner.ClaimPoolActivationAsync(poolId, cancellationToken);

        public Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default) => inner.ReleaseAbandonedAsync(poolId, release, fence, cancellationToken);

        /// <summary>Renewals fail with a raw driver exception, as a store that let one through unclassified would.</summary>
        public volatile bool LeakDriverErrors;

        public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) =>
            LeakDriverErrors
                ? throw new Npgsql.NpgsqlException("Exception while reading from stream", new TimeoutException("Timeout during reading attempt"))
                : inner.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);

        public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) => inner.GetAllocationAsync(poolId, allocationId, cancellationToken);

        public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) => inner.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken);

        public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default) => inner.ReapExpiredAsync(maxCount, cancellationToken);
    }
}

/// <summary>A store registered by the embedding code (tests, the load harness) serves instead of the configured one.</summary>
public sealed class SuppliedStoreTests
{
    [Fact]
    public async Task SuppliedStore_Serves_AndTheConfiguredDatabaseIsNeverContacted()
    {
        // Port 1 refuses connections: were the configured store still registered, start-up would fail.
        await using var host = await TestHost.StartAsync(
            ["--ConnectionStrings:Allocator=Host=127.0.0.1;Port=1;Username=nobody;Timeout=2", "--Allocator:Storage:Provider=postgres"],
            builder => builder.Services.AddAllocatorInMemory());

        var store = host.Services.GetRequiredService<InMemoryWorkerStore>();
        host.Services.GetRequiredService<IWorkerStore>().Should().BeSameAs(store);
        host.Services.GetRequiredService<IPoolChangeFeed>().Should().BeSameAs(store);
        host.Services.GetRequiredService<IPoolSettingsCache>().Should().BeSameAs(store);
        host.Services.GetServices<IWorkerStore>().Should().ContainSingle("only the supplied store is registered");
        var pool = Unique.Name("supplied");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings());
        (await store.GetPoolAsync(pool)).Should().NotBeNull("the host serves from the supplied store");
    }

    [Fact]
    public void AddStore_Twice_Throws()
    {
        var services = new ServiceCollection().AddAllocatorInMemory();

        var again = () => services.AddAllocatorPostgres("Host=127.0.0.1");

        again.Should().Throw<InvalidOperationException>().WithMessage("*already registered*");
    }

    [Fact]
    public async Task InvalidStoreOptions_FailStart_NamingTheOption()
    {
        var start = async () => await TestHost.StartAsync([], builder => builder.Services.AddAllocatorInMemory(o => o.SkipRetries = -1));

        (await start.Should().ThrowAsync<Microsoft.Extensions.Options.OptionsValidationException>()).Which.Message.Should().Contain("SkipRetries");
    }
}
