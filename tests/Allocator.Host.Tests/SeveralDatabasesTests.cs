using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Allocator.Client;
using Allocator.Host.Storage;
using Microsoft.Extensions.DependencyInjection;
using Npgsql;

namespace Allocator.Host.Tests;

/// <summary>
/// Two PostgreSQL databases of the test server (CREATE DATABASE), made for the run and dropped
/// after it: what a host with several databases (issue 23) is tested on in CI.
/// </summary>
public sealed class TwoDatabasesFixture : IAsyncLifetime
{
    private readonly string _run = Guid.NewGuid().ToString("N")[..8];

    /// <summary>The default database (it holds the pool directory) and the second one.</summary>
    public string A { get; private set; } = "";

    public string B { get; private set; } = "";

    public string NameA => $"t23_{_run}_a";

    public string NameB => $"t23_{_run}_b";

    public async Task InitializeAsync()
    {
        A = await CreateAsync(NameA);
        B = await CreateAsync(NameB);
    }

    public async Task DisposeAsync()
    {
        NpgsqlConnection.ClearAllPools();
        await using var connection = new NpgsqlConnection(TestPostgres.ConnectionString);
        await connection.OpenAsync();
        foreach (var name in new[] { NameA, NameB })
        {
            await using var drop = new NpgsqlCommand($"DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)", connection);
            await drop.ExecuteNonQueryAsync();
        }
    }

    /// <summary>The arguments of a host on both databases, <c>a</c> the default.</summary>
    public string[] HostArgs(params string[] more) =>
    [
        $"--Allocator:Databases:a={A}",
        $"--Allocator:Databases:b={B}",
        "--Allocator:Storage:DefaultDatabase=a",
        .. more,
    ];

    public async Task<T?> ScalarAsync<T>(string connectionString, string sql, params object[] args)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql, connection);
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        var value = await command.ExecuteScalarAsync();
        return value is null or DBNull ? default : (T)value;
    }

    private static async Task<string> CreateAsync(string name)
    {
        await using var connection = new NpgsqlConnection(TestPostgres.ConnectionString);
        await connection.OpenAsync();
        await using var create = new NpgsqlCommand($"CREATE DATABASE \"{name}\"", connection);
        await create.ExecuteNonQueryAsync();
        return new NpgsqlConnectionStringBuilder(TestPostgres.ConnectionString) { Database = name }.ConnectionString;
    }
}

/// <summary>
/// Pools placed over two databases (issue 23): placement at creation (named and by rule), routing,
/// the directory, moving a drained pool (also as seen by a second instance that cached the old
/// route), health by database, a database that cannot be reached taking only its own pools.
/// </summary>
public sealed class SeveralDatabasesTests(TwoDatabasesFixture databases) : IClassFixture<TwoDatabasesFixture>
{
    private static string NewPool(string name) => $"{name}-{Guid.NewGuid().ToString("N")[..10]}";

    private Task<long> PoolsInAsync(string connectionString, string pool) =>
        databases.ScalarAsync<long>(connectionString, "SELECT count(*) FROM allocator.pools WHERE pool_id = $1", pool);

    [Fact]
    public async Task NamedAndRulePlacement_RouteEveryCall_ToThePoolsDatabase()
    {
        await using var host = await TestHost.StartAsync(databases.HostArgs());
        var onB = NewPool("on-b");

        var created = await host.Admin.PutPoolAsync(onB, new Client.PoolSettings { Database = "b" });
        await host.Admin.RegisterWorkersAsync(onB, [new WorkerBatchEntry("w1", "10.0.0.1:1", 2)]);
        var allocation = (await host.Broker.AllocateAsync(onB, new AllocateRequest(), "s-1")).Allocation!;
        await host.Broker.ReleaseAsync(onB, allocation.AllocationId, allocation.Epoch);

        created.Database.Should().Be("b");
        (await host.Broker.GetPoolAsync(onB)).Database.Should().Be("b");
        (await PoolsInAsync(databases.B, onB)).Should().Be(1, "the pool lives in b");
        (await PoolsInAsync(databases.A, onB)).Should().Be(0);
        (await databases.ScalarAsync<string>(databases.A, "SELECT database FROM allocator.pool_directory WHERE pool_id = $1", onB)).Should().Be("b", "the directory is in the default database");
        (await databases.ScalarAsync<long>(databases.B, "SELECT count(*) FROM allocator.allocation_history WHERE pool_id = $1", onB)).Should().Be(1);

        // By rule, a new pool goes to the database with the fewest pools, the default (a) first
        // among equals. Counted here, not assumed: the class's other tests leave pools behind.
        var pools = new Dictionary<string, long>
        {
            ["a"] = await databases.ScalarAsync<long>(databases.A, "SELECT count(*) FROM allocator.pools"),
            ["b"] = await databases.ScalarAsync<long>(databases.B, "SELECT count(*) FROM allocator.pools"),
        };
        var expected = new List<string>();
        var placed = new List<string>();
        for (var i = 0; i < 4; i++)
        {
            var fewest = pools["a"] <= pools["b"] ? "a" : "b";
            pools[fewest]++;
            expected.Add(fewest);
            placed.Add((await host.Admin.PutPoolAsync(NewPool("rule"), new Client.PoolSettings())).Database!);
        }

        placed.Should().Equal(expected, "the rule: fewest pools first, the default among equals");
    }

    [Fact]
    public async Task ExistingPool_NamingAnotherDatabase_Is409_AndAnUnknownDatabase_Is400()
    {
        await using var host = await TestHost.StartAsync(databases.HostArgs());
        var pool = NewPool("stay");
        await host.Admin.PutPoolAsync(pool, new Client.PoolSettings { Database = "a" });

        using var conflict = await host.Http.PutAsJsonAsync($"v1/pools/{pool}", new { database = "b" });
        using var unknown = await host.Http.PutAsJsonAsync($"v1/pools/{NewPool("x")}", new { database = "nowhere" });
        using var same = await host.Http.PutAsJsonAsync($"v1/pools/{pool}", new { database = "A", maxWaitMs = 10 });

        conflict.StatusCode.Should().Be(HttpStatusCode.Conflict);
        (await conflict.Content.ReadAsStringAsync()).Should().Contain("/move");
        unknown.StatusCode.Should().Be(HttpStatusCode.BadRequest);
        same.StatusCode.Should().Be(HttpStatusCode.OK, "names are case-insensitive, as configuration keys");
    }

    [Fact]
    public async Task Move_OnlyADrainedEmptyPool_AndASecondInstanceFollows()
    {
        await using var first = await TestHost.StartAsync(databases.HostArgs());
        await using var second = await TestHost.StartAsync(databases.HostArgs());
        var pool = NewPool("move");
        await first.Admin.PutPoolAsync(pool, new Client.PoolSettings { Database = "a", MaxWaitMs = 250 });
        await first.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "10.0.0.1:1", 2)]);
        var held = (await first.Broker.AllocateAsync(pool, new AllocateRequest(), "before-move")).Allocation!;
        (await second.Broker.GetPoolAsync(pool)).Database.Should().Be("a", "the second instance caches the route to a");

        // Not empty: refused, nothing changes.
        using var refused = await first.Http.PostAsJsonAsync($"v1/pools/{pool}/move", new { database = "b" });
        refused.StatusCode.Should().Be(HttpStatusCode.Conflict);
        (await refused.Content.ReadAsStringAsync()).Should().Contain("1 workers, 1 active allocations");

        // The documented steps: drain, let the allocations end, deregister, move.
        await first.Admin.DrainWorkerAsync(pool, "w1");
        await first.Broker.ReleaseAsync(pool, held.AllocationId, held.Epoch);
        await first.Admin.DeregisterWorkerAsync(pool, "w1");
        using var moved = await first.Http.PostAsJsonAsync($"v1/pools/{pool}/move", new { database = "b" });
        moved.StatusCode.Should().Be(HttpStatusCode.OK, await moved.Content.ReadAsStringAsync());
        var move = await moved.Content.ReadFromJsonAsync<JsonElement>();
        move.GetProperty("database").GetString().Should().Be("b");
        move.GetProperty("previousDatabase").GetString().Should().Be("a");
        move.GetProperty("moved").GetBoolean().Should().BeTrue();

        // The second instance, which cached a, registers and allocates on b.
        await second.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w2", "10.0.0.2:1", 2)]);
        var after = await second.Broker.AllocateAsync(pool, new AllocateRequest(), "after-move");

        after.Status.Should().Be(AllocateStatus.Allocated);
        (await second.Broker.GetPoolAsync(pool)).Should().Match<Client.PoolStatistics>(s => s.Database == "b" && s.MaxWaitMs == 250, "the settings moved with the pool");
        (await PoolsInAsync(databases.A, pool)).Should().Be(0, "the pool left a");
        (await PoolsInAsync(databases.B, pool)).Should().Be(1);
        (await databases.ScalarAsync<long>(databases.A, "SELECT count(*) FROM allocator.allocation_history WHERE pool_id = $1", pool))
            .Should().Be(1, "allocations that ended before the move stay in a's history until the retention ends");

        // Moving it again to where it is changes nothing.
        using var again = await second.Http.PostAsJsonAsync($"v1/pools/{pool}/move", new { database = "b" });
        (await again.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("moved").GetBoolean().Should().BeFalse();
    }

    /// <summary>
    /// Issue 39, hypothesis 8: an instance that missed a move's news (its LISTEN connections are
    /// down, here turned off, with its settings cache kept long) must not answer "not found" for a
    /// live allocation or worker of the moved pool. (Not shown to fail: the instance followed the
    /// pool before these calls; kept as the guard of that promise.)
    /// </summary>
    [Fact]
    public async Task StaleRoute_ToAMovedPool_FollowsIt_ForLiveAllocationsAndWorkers()
    {
        await using var first = await TestHost.StartAsync(databases.HostArgs());
        await using var deaf = await TestHost.StartAsync(databases.HostArgs(
            "--Allocator:Storage:Postgres:ListenForChanges=false",
            "--Allocator:Storage:Postgres:SettingsCacheDuration=00:10:00"));
        var pool = NewPool("stale");
        await first.Admin.PutPoolAsync(pool, new Client.PoolSettings { Database = "a" });
        (await deaf.Broker.GetPoolAsync(pool)).Database.Should().Be("a", "the deaf instance routes the pool to a");
        await deaf.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w0", "10.0.0.0:1", 2)]); // and keeps a's settings of the pool
        await deaf.Admin.DeregisterWorkerAsync(pool, "w0");

        using var moved = await first.Http.PostAsJsonAsync($"v1/pools/{pool}/move", new { database = "b" });
        moved.StatusCode.Should().Be(HttpStatusCode.OK, await moved.Content.ReadAsStringAsync());
        await first.Admin.RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "10.0.0.1:1", 2)]);
        var held = (await first.Broker.AllocateAsync(pool, new AllocateRequest { LeaseSeconds = 60 }, "on-b")).Allocation!;

        (await deaf.Broker.GetAllocationAsync(pool, held.AllocationId)).Active.Should().BeTrue("a live allocation is found where its pool lives");
        (await deaf.Broker.RenewAsync(pool, held.AllocationId, held.Epoch, leaseSeconds: 60)).Active.Should().BeTrue();
        await deaf.Admin.DrainWorkerAsync(pool, "w1");
        (await first.Admin.GetWorkerAsync(pool, "w1")).State.Should().Be("draining", "the drain reached the worker that keeps receiving allocations");
    }

    [Fact]
    public async Task UnknownPool_IsNotFound_AndNoRouteIsKept()
    {
        await using var host = await TestHost.StartAsync(databases.HostArgs());
        var unknown = NewPool("nobody");

        var result = () => host.Broker.AllocateAsync(unknown, new AllocateRequest(), "s");

        (await result.Should().ThrowAsync<AllocatorApiException>()).Which.StatusCode.Should().Be(HttpStatusCode.NotFound);
        host.Services.GetRequiredService<IPoolPlacement>().KnownDatabaseOf(unknown).Should().BeNull("a name that names no pool is never cached (issue 22)");
    }

    [Fact]
    public async Task DatabaseThatCannotBeReached_TakesOnlyItsOwnPools_AndHealthNamesIt()
    {
        // c points at a port where nothing listens: the instance starts anyway and keeps trying c.
        var nowhere = new NpgsqlConnectionStringBuilder(databases.A) { Port = UnusedPort(), Timeout = 2 }.ConnectionString;
        await using var host = await TestHost.StartAsync(databases.HostArgs($"--Allocator:Databases:c={nowhere}"));
        var onA = NewPool("healthy");
        await host.Admin.PutPoolAsync(onA, new Client.PoolSettings { Database = "a" });
        await host.Admin.RegisterWorkersAsync(onA, [new WorkerBatchEntry("w1", "10.0.0.1:1", 5)]);
        var onC = NewPool("on-c");
        await databases.ScalarAsync<int>(databases.A, "INSERT INTO allocator.pool_directory (pool_id, database) VALUES ($1, 'c')", onC);

        var broker = host.NewHttp(TestHost.BrokerKey);
        broker.DefaultRequestHeaders.Add("Idempotency-Key", "s-c");
        using var down = await broker.PostAsJsonAsync($"v1/pools/{onC}/allocations", new { units = 1 });
        var up = await host.Broker.AllocateAsync(onA, new AllocateRequest(), "s-a");
        using var health = await host.NewHttp(null).GetAsync("health");
        using var ready = await host.NewHttp(null).GetAsync("health/ready");

        down.StatusCode.Should().Be(HttpStatusCode.ServiceUnavailable);
        down.Headers.RetryAfter.Should().NotBeNull();
        (await down.Content.ReadAsStringAsync()).Should().Contain("'c'");
        up.Status.Should().Be(AllocateStatus.Allocated);
        health.StatusCode.Should().Be(HttpStatusCode.OK, "degraded: the other databases' pools are served ({0})", await health.Content.ReadAsStringAsync());
        ready.StatusCode.Should().Be(HttpStatusCode.OK);
        var body = await health.Content.ReadFromJsonAsync<JsonElement>();
        body.GetProperty("status").GetString().Should().Be("Degraded");
        body.GetProperty("databases").GetProperty("a").GetString().Should().Be("answers");
        body.GetProperty("databases").GetProperty("b").GetString().Should().Be("answers");
        body.GetProperty("databases").GetProperty("c").GetString().Should().StartWith("is not started");
    }

    /// <summary>A loopback port nothing listens on (bound, then released).</summary>
    private static int UnusedPort()
    {
        using var listener = new System.Net.Sockets.TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    [Fact]
    public async Task Configuration_WithoutADefault_FailsTheStart_NamingTheSetting()
    {
        var start = () => TestHost.StartAsync([$"--Allocator:Databases:a={databases.A}", $"--Allocator:Databases:b={databases.B}"]);

        (await start.Should().ThrowAsync<Microsoft.Extensions.Options.OptionsValidationException>()).Which.Message.Should().Contain("Allocator:Storage:DefaultDatabase");
    }
}
