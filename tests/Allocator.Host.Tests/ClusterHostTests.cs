using Allocator.Client;
using Allocator.Networking;
using Allocator.Telemetry;

namespace Allocator.Host.Tests;

/// <summary>
/// Two host instances that form ONE Orleans cluster, with membership in PostgreSQL
/// (Allocator:Cluster:Membership=postgres, a schema of their own for this test run): a pool has
/// one grain for the whole cluster, whichever instance a caller reaches.
/// </summary>
public sealed class OneClusterFixture : IAsyncLifetime
{
    public TestHost A { get; private set; } = null!;

    public TestHost B { get; private set; } = null!;

    public async Task InitializeAsync()
    {
        var run = Guid.NewGuid().ToString("N")[..10];
        string[] cluster =
        [
            $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
            "--Allocator:Cluster:Membership=postgres",
            $"--Allocator:Cluster:ClusterId=test-{run}",
            $"--Allocator:Cluster:MembershipSchema=cluster_{run}",

            // Slow re-check: a waiter served within seconds was woken by the release itself.
            "--Allocator:Grains:WaiterRecheckInterval=00:01:00",
        ];
        A = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:SiloPort={FreePort.Next()}"]);
        B = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:SiloPort={FreePort.Next()}"]);
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

public sealed class ClusterHostTests(OneClusterFixture fixture) : IClassFixture<OneClusterFixture>
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);
    private readonly TestHost _a = fixture.A;
    private readonly TestHost _b = fixture.B;

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    public async Task ClientAbortsWhileItsBatchWaitsInTheStore_ThroughEitherInstance_TheGrainReleasesWhatItAllocated(int through)
    {
        // Issue 20, #1: the grain must hear of a broker that closed its connection while its
        // allocation was being written, through the instance hosting the grain or the other one.
        var host = through == 0 ? _a : _b;
        var pool = await MultiInstanceTests.NewPoolAsync(_a, "cluster-abort", workers: 1, capacity: 5, new Client.PoolSettings { Strategy = "strict" });
        await _a.Broker.GetPoolAsync(pool);
        await using var connection = new Npgsql.NpgsqlConnection(TestPostgres.ConnectionString);
        await connection.OpenAsync();
        await using var hold = await connection.BeginTransactionAsync();
        await using (var lockRow = new Npgsql.NpgsqlCommand("SELECT 1 FROM allocator.workers WHERE pool_id = $1 FOR UPDATE", connection, hold))
        {
            lockRow.Parameters.Add(new Npgsql.NpgsqlParameter { Value = pool });
            await lockRow.ExecuteNonQueryAsync();
        }

        using var outcomes = new GrainOutcomes(pool);
        using var impatient = host.NewHttp(TestHost.BrokerKey);
        using var abort = new CancellationTokenSource();
        using var request = new HttpRequestMessage(HttpMethod.Post, $"/v1/pools/{pool}/allocations") { Content = System.Net.Http.Json.JsonContent.Create(new { units = 1 }) };
        request.Headers.Add("Idempotency-Key", "gone");
        var send = impatient.SendAsync(request, abort.Token);

        // The broker leaves once its allocation waits in the store: its statement waits for the
        // row this test locked. (Issue 46: a fixed 300 ms before the abort was too short on a busy
        // machine for a call through the other instance to get that far. The grain then had
        // answered nothing and no statement waited: there was nothing for it to hear of.)
        await MultiInstanceTests.UntilAsync(async () => await BlockedByAsync(connection.ProcessID) > 0, Limit, "the allocation's statement to wait for the row this test locked");
        await abort.CancelAsync();
        var sent = () => send;
        await sent.Should().ThrowAsync<OperationCanceledException>("the broker left before its allocation was answered");

        // The lock is let go only once the grain has heard of the abort, so the statement commits
        // for a caller the grain knows is gone (a fixed pause here lost that race on a loaded machine).
        try
        {
            await MultiInstanceTests.UntilAsync(() => Task.FromResult(outcomes.Count("canceled") > 0), Limit, "the grain to hear that its caller aborted");
        }
        catch (TimeoutException ex)
        {
            throw new TimeoutException($"{ex.Message} The pool grain's answers: {outcomes}; statements waiting for the locked row: {await BlockedByAsync(connection.ProcessID)}.", ex);
        }

        await hold.CommitAsync();

        await MultiInstanceTests.UntilAsync(async () => (await _a.Broker.GetPoolAsync(pool)).ActiveAllocations == 0, Limit, "the grain to release the allocation of the aborted call");
    }

    /// <summary>How many statements wait for a lock the backend <paramref name="holder"/> holds.</summary>
    private static async Task<int> BlockedByAsync(int holder)
    {
        await using var probe = new Npgsql.NpgsqlConnection(TestPostgres.ConnectionString);
        await probe.OpenAsync();
        await using var count = new Npgsql.NpgsqlCommand("SELECT count(*)::int FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", probe);
        count.Parameters.Add(new Npgsql.NpgsqlParameter { Value = holder });
        return (int)(await count.ExecuteScalarAsync())!;
    }

    [Fact]
    public async Task WaiterParkedThroughA_IsSeenThroughB_AndWokenByAReleaseThroughB()
    {
        var pool = await MultiInstanceTests.NewPoolAsync(_a, "cluster-wake", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await _b.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;

        var waiter = _a.Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 20_000 }, "waiter");

        // One grain for the cluster: B reports the waiter that A parked.
        await MultiInstanceTests.UntilAsync(async () => await MultiInstanceTests.WaitersOnAsync(_b, pool) == 1 || waiter.IsCompleted, Limit, "B to see the waiter parked through A");
        waiter.IsCompleted.Should().BeFalse("the pool is full");

        await _b.Broker.ReleaseAsync(pool, holder.AllocationId, holder.Epoch);

        var result = await TaskLimit.WithinAsync(waiter, Limit, "the release through B to wake the waiter parked through A");
        result.Status.Should().Be(AllocateStatus.Allocated);
        result.Allocation!.SessionKey.Should().Be("waiter");
    }

    [Fact]
    public async Task WaitersThroughBothInstances_AreServedFirstComeFirstServed()
    {
        var pool = await MultiInstanceTests.NewPoolAsync(_a, "cluster-fifo", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await _a.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;
        List<Task<AllocateResult>> waiters = [];
        var via = new[] { _a, _b, _a, _b };
        for (var i = 0; i < via.Length; i++)
        {
            waiters.Add(via[i].Broker.AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 30_000 }, $"waiter-{i}"));
            var expected = i + 1;
            await MultiInstanceTests.UntilAsync(async () => await MultiInstanceTests.WaitersOnAsync(_a, pool) == expected, Limit, $"waiter {i} to be parked");
        }

        var current = holder;
        for (var i = 0; i < via.Length; i++)
        {
            // Released alternately through each instance; the longest-waiting caller is served.
            await via[(i + 1) % 2].Broker.ReleaseAsync(pool, current.AllocationId, current.Epoch);
            // Served at all, and in order: no time is promised, so the wait is the suite's "eventually" (ADR 0030).
            var served = await TaskLimit.WithinAsync(waiters[i], Limit, $"waiter {i} to be served");
            served.Allocation!.SessionKey.Should().Be($"waiter-{i}");
            waiters.Skip(i + 1).Should().NotContain(t => t.IsCompleted, "later waiters wait their turn");
            current = served.Allocation;
        }
    }
}

/// <summary>Counts the pool grain's allocate answers for one pool, by outcome (allocator.allocation.outcomes).</summary>
internal sealed class GrainOutcomes : IDisposable
{
    private readonly System.Diagnostics.Metrics.MeterListener _listener = new();
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, long> _counts = new(StringComparer.Ordinal);

    public GrainOutcomes(string pool)
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument is { Meter.Name: AllocatorTelemetry.Name, Name: "allocator.allocation.outcomes" })
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((_, value, tags, _) =>
        {
            string? poolTag = null, outcomeTag = null;
            foreach (var tag in tags)
            {
                switch (tag.Key)
                {
                    case AllocatorTelemetry.Tags.Pool: poolTag = tag.Value as string; break;
                    case AllocatorTelemetry.Tags.Outcome: outcomeTag = tag.Value as string; break;
                }
            }

            if (poolTag == pool && outcomeTag is not null)
            {
                _counts.AddOrUpdate(outcomeTag, value, (_, count) => count + value);
            }
        });
        _listener.Start();
    }

    public long Count(string outcome) => _counts.GetValueOrDefault(outcome);

    /// <summary>Every outcome answered so far, for a failure message ("none" when the grain answered nothing).</summary>
    public override string ToString() => _counts.IsEmpty ? "none" : string.Join(", ", _counts.OrderBy(c => c.Key, StringComparer.Ordinal).Select(c => $"{c.Key} x{c.Value}"));

    public void Dispose() => _listener.Dispose();
}
