using System.Diagnostics;
using Allocator.Client;

namespace Allocator.Host.Tests;

/// <summary>
/// Two host instances on one PostgreSQL database (ALLOCATOR_POSTGRES) that are NOT one Orleans
/// cluster (each its own single-instance cluster, as two deployments sharing a database would
/// be): each has its own pool grain. Instance A re-checks its waiters only once a minute, so a
/// waiter on A that gets a slot within seconds of a release through B was woken by the store's
/// change notification (PostgreSQL LISTEN/NOTIFY), not by the periodic safety-net re-check.
/// </summary>
public sealed class TwoHostsFixture : IAsyncLifetime
{
    /// <summary>A's waiter re-check period: far longer than any wait in these tests.</summary>
    public static readonly TimeSpan SlowRecheck = TimeSpan.FromMinutes(1);

    public TestHost A { get; private set; } = null!;

    public TestHost B { get; private set; } = null!;

    public async Task InitializeAsync()
    {
        string[] database = [$"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}"];
        A = await TestHost.StartAsync([.. database, $"--Allocator:Grains:WaiterRecheckInterval={SlowRecheck}"]);
        B = await TestHost.StartAsync(database);
    }

    public async Task DisposeAsync()
    {
        if (B is not null)
        {
            await B.DisposeAsync();
        }

        if (A is not null)
        {
            await A.DisposeAsync();
        }
    }
}

public sealed class MultiInstanceTests(TwoHostsFixture fixture) : IClassFixture<TwoHostsFixture>
{
    private static readonly TimeSpan WakeLimit = TimeSpan.FromSeconds(10);
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);

    private readonly TestHost _a = fixture.A;
    private readonly TestHost _b = fixture.B;

    /// <summary>
    /// An allocate as a broker sends it: a 503 (nothing allocated, or the outcome unknown) is sent
    /// again with the same key after its Retry-After, as <c>AddAllocatorClient</c>'s retry does.
    /// Two instances that are not one cluster run two grains on the pool, whose batches contend
    /// for its rows; with one core kept busy a blocking wait outlasted the lock timeout while the
    /// other instance's batch held the row (a clean-clone run, 2026-12-02), which the service
    /// answers 503 "nothing allocated, retry" by design (ADR 0007).
    /// </summary>
    private static async Task<AllocateResult> AllocateAsBrokerAsync(TestHost host, string pool, string key)
    {
        for (var attempt = 1; ; attempt++)
        {
            try
            {
                return await host.Broker.AllocateAsync(pool, new AllocateRequest(), key);
            }
            catch (AllocatorApiException ex) when (ex.StatusCode == System.Net.HttpStatusCode.ServiceUnavailable && attempt < 5)
            {
                await Task.Delay(ex.RetryAfter ?? TimeSpan.FromSeconds(1));
            }
        }
    }

    [Fact]
    public async Task TwoInstances_ShareOnePool_FillItExactlyWithoutDuplicates()
    {
        var pool = await NewPoolAsync(_a, "multi-fill", workers: 2, capacity: 10);

        // 20 callers, alternating instances, all released at once by one gate.
        var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var calls = Enumerable.Range(0, 20).Select(async i =>
        {
            await gate.Task;
            var host = i % 2 == 0 ? _a : _b;
            return await AllocateAsBrokerAsync(host, pool, $"multi-{i}");
        }).ToList();
        gate.SetResult();
        var results = await TaskLimit.WithinAsync(Task.WhenAll(calls), Limit, "20 concurrent allocations over two instances");

        results.Should().OnlyContain(r => r.Status == AllocateStatus.Allocated, "2 workers x 10 slots hold all 20");
        results.Select(r => r.Allocation!.AllocationId).Should().OnlyHaveUniqueItems();
        results.Select(r => r.Allocation!.SessionKey).Should().BeEquivalentTo(Enumerable.Range(0, 20).Select(i => $"multi-{i}"));
        var workers = await _b.Admin.GetWorkersAsync(pool);
        workers.Select(w => w.Load).Should().Equal(10, 10);
        var stats = await _a.Broker.GetPoolAsync(pool);
        stats.Load.Should().Be(20);
        stats.ActiveAllocations.Should().Be(20);
        stats.FreeSlots.Should().Be(0);

        (await _a.Broker.AllocateAsync(pool, new AllocateRequest(), "multi-21a")).Status.Should().Be(AllocateStatus.NoCapacity);
        (await _b.Broker.AllocateAsync(pool, new AllocateRequest(), "multi-21b")).Status.Should().Be(AllocateStatus.NoCapacity);
        (await _b.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(20, "no-capacity answers write nothing");
    }

    [Fact]
    public async Task TwoInstances_SameIdempotencyKeyOnBoth_AllocateOnce()
    {
        var pool = await NewPoolAsync(_a, "multi-idem", workers: 2, capacity: 10);

        var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var calls = new[] { _a, _b, _a, _b }.Select(async host =>
        {
            await gate.Task;
            return await host.Broker.AllocateAsync(pool, new AllocateRequest(), "same-key");
        }).ToList();
        gate.SetResult();
        var results = await TaskLimit.WithinAsync(Task.WhenAll(calls), Limit, "four allocations with one idempotency key over two instances");

        results.Should().OnlyContain(r => r.Succeeded);
        results.Count(r => r.Status == AllocateStatus.Allocated).Should().Be(1);
        results.Select(r => r.Allocation!.AllocationId).Distinct().Should().HaveCount(1);
        (await _b.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task Waiter_OnInstanceA_IsWokenByReleaseThroughInstanceB()
    {
        var pool = await NewPoolAsync(_b, "multi-wake", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await _b.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;

        var waiter = _a.Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 20_000 }, "waiter");
        await UntilAsync(async () => await WaitersOnAsync(_a, pool) == 1 || waiter.IsCompleted, Limit, "the waiter to be parked in instance A's pool grain");
        waiter.IsCompleted.Should().BeFalse("the pool is full, so the waiter must still be waiting");
        await Task.WhenAny(waiter, Task.Delay(TimeSpan.FromMilliseconds(300)));
        waiter.IsCompleted.Should().BeFalse("nothing has been released yet");

        await _b.Broker.ReleaseAsync(pool, holder.AllocationId, holder.Epoch);

        var result = await TaskLimit.WithinAsync(waiter, WakeLimit,
            $"the waiter on instance A to be woken by the release through instance B (A re-checks only every {TwoHostsFixture.SlowRecheck}: a wake-up this soon came through LISTEN/NOTIFY)");
        result.Status.Should().Be(AllocateStatus.Allocated);
        result.Allocation!.SessionKey.Should().Be("waiter");
        result.Allocation.WorkerId.Should().Be(holder.WorkerId);
        (await WaitersOnAsync(_a, pool)).Should().Be(0);
        var stats = await _b.Broker.GetPoolAsync(pool);
        stats.Load.Should().Be(1);
        stats.ActiveAllocations.Should().Be(1);
    }

    [Fact]
    public async Task Waiter_OnOneInstance_IsWokenByAnotherCallersReleaseOnTheSameInstance()
    {
        var pool = await NewPoolAsync(_a, "single-wake", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await _a.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;

        // Without a wait the full pool answers no-capacity at once.
        var refused = await _a.Broker.AllocateAsync(pool, new AllocateRequest(), "impatient");
        refused.Status.Should().Be(AllocateStatus.NoCapacity);

        var waiter = _a.Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 20_000 }, "patient");
        await UntilAsync(async () => await WaitersOnAsync(_a, pool) == 1 || waiter.IsCompleted, Limit, "the waiter to be parked in the pool grain");
        waiter.IsCompleted.Should().BeFalse("the pool is full, so the waiter must still be waiting");
        (await _a.Broker.GetPoolAsync(pool)).Waiters.Should().Be(1);
        await Task.WhenAny(waiter, Task.Delay(TimeSpan.FromMilliseconds(300)));
        waiter.IsCompleted.Should().BeFalse("nothing has been released yet");

        // Another caller (its own HTTP client) releases.
        await _a.NewClient(TestHost.BrokerKey).ReleaseAsync(pool, holder.AllocationId, holder.Epoch);

        var result = await TaskLimit.WithinAsync(waiter, WakeLimit, "the waiter to be woken by the release on the same instance");
        result.Status.Should().Be(AllocateStatus.Allocated);
        result.Allocation!.SessionKey.Should().Be("patient");
        (await _a.Broker.GetAllocationAsync(pool, holder.AllocationId)).Active.Should().BeFalse();
        (await _a.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1);
    }

    internal static async Task<int> WaitersOnAsync(TestHost host, string pool) => (await host.Broker.GetPoolAsync(pool)).Waiters;

    internal static async Task<string> NewPoolAsync(TestHost host, string name, int workers, int capacity, Client.PoolSettings? settings = null)
    {
        var pool = name + "-" + Guid.NewGuid().ToString("N")[..12];
        await host.Admin.PutPoolAsync(pool, settings ?? new Client.PoolSettings());
        var results = await host.Admin.RegisterWorkersAsync(pool, [.. Enumerable.Range(1, workers).Select(i => new WorkerBatchEntry($"w{i}", $"10.0.1.{i}:7000", capacity))]);
        results.Should().OnlyContain(r => r.Status == "created");
        return pool;
    }

    internal static async Task UntilAsync(Func<Task<bool>> condition, TimeSpan limit, string what)
    {
        var watch = Stopwatch.StartNew();
        while (!await condition())
        {
            if (watch.Elapsed > limit)
            {
                throw new TimeoutException($"Timed out after {limit} waiting until {what}.");
            }

            await Task.Delay(5);
        }
    }
}

/// <summary>A start against a database that cannot be reached fails fast, naming the setting to fix.</summary>
public sealed class StartupFailureTests
{
    [Theory]
    [InlineData("postgres", "Host=127.0.0.1;Port=1;Username=postgres;Timeout=3")]
    [InlineData("sqlserver", "Server=127.0.0.1,1;User Id=sa;Password=not-logged;TrustServerCertificate=true")]
    public async Task Start_UnreachableDatabase_FailsFastNamingTheSetting(string provider, string connectionString)
    {
        var start = async () => await TestHost.StartAsync([$"--Allocator:Storage:Provider={provider}", $"--ConnectionStrings:Allocator={connectionString}"])
            .WaitAsync(TimeSpan.FromSeconds(30));

        var failure = (await start.Should().ThrowAsync<InvalidOperationException>()).Which;
        failure.Message.Should().Contain("ConnectionStrings:Allocator").And.NotContain("not-logged");
    }
}
