using System.Text.Json;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class ExplainTests : PostgresStoreTestBase
{
    [Fact]
    public async Task PickQuery_On100000Workers_SeeksTheScoreIndexWithoutSorting()
    {
        await Store.UpsertPoolAsync("big", PoolSettings.Default);
        await Store.UpsertPoolAsync("other", PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'big', 'w' || lpad(g::text, 6, '0'), 'h:' || g, 100, g % 100 FROM generate_series(1, 100000) g;
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'other', 'o' || g, 'h:' || g, 100, 0 FROM generate_series(1, 1000) g;
            ANALYZE "{Schema}".workers;
            """);

        await using var command = PostgresTestDatabase.DataSource.CreateCommand("EXPLAIN (FORMAT JSON) " + Store.Sql.Get("pick_candidate"));
        command.Parameters.Add(new NpgsqlParameter { Value = "big" });
        command.Parameters.Add(new NpgsqlParameter { Value = DateTimeOffset.MinValue.UtcDateTime.AddYears(1) });
        command.Parameters.Add(new NpgsqlParameter { Value = 1 });
        command.Parameters.Add(new NpgsqlParameter { Value = Array.Empty<string>() });
        var json = (string)(await command.ExecuteScalarAsync())!;

        var nodes = new List<JsonElement>();
        Collect(JsonDocument.Parse(json).RootElement[0].GetProperty("Plan"), nodes);
        var types = nodes.Select(n => n.GetProperty("Node Type").GetString()).ToList();
        types.Should().NotContain("Sort", $"the ORDER BY must be read from the index, plan: {string.Join(" > ", types)}");
        nodes.Should().Contain(n => n.GetProperty("Node Type").GetString() == "Index Scan"
            && n.GetProperty("Index Name").GetString() == "workers_pick", $"plan: {json}");
    }

    [Fact]
    public async Task AllocateBatch_On100000Workers_RunsThePickAsAnIndexSeek()
    {
        await Store.UpsertPoolAsync("big", PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'big', 'w' || lpad(g::text, 6, '0'), 'h:' || g, 100, g % 100 FROM generate_series(1, 100000) g;
            ANALYZE "{Schema}".workers;
            """);

        // auto_explain logs the plans of the statements inside allocate_batch as notices, so this
        // checks the query the function really runs, not a copy of it.
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        // JIT for anything: the function's own jit = off must still keep it out.
        var plans = await WatchPlansAsync(connection, analyze: false, "SET jit_above_cost = 0");

        await using (var call = AllocateCommand(connection, "big", ["s1", "s2"]))
        {
            await using var reader = await call.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                reader.GetString(1).Should().Be("allocated");
            }
        }

        // A batch of alike requests is picked by one set statement; single or mixed requests by
        // one query each. Either way every locking scan must seek the score index, never sort the pool.
        var pick = plans.Where(p => p.Contains("\"LockRows\"", StringComparison.Ordinal)).ToList();
        pick.Should().NotBeEmpty("auto_explain reports the locking pick");
        foreach (var text in plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)))
        {
            var nodes = new List<JsonElement>();
            Collect(JsonDocument.Parse(text[text.IndexOf('{', StringComparison.Ordinal)..]).RootElement.GetProperty("Plan"), nodes);
            nodes.Where(n => n.GetProperty("Node Type").GetString() == "Seq Scan")
                .Select(n => n.TryGetProperty("Relation Name", out var relation) ? relation.GetString() : null)
                .Should().NotContain("workers", $"no statement of allocate_batch may scan the pool: {text}");
            if (!text.Contains(".allocate_batch(", StringComparison.Ordinal))
            {
                // The statements inside the function (the outer call is the session's own).
                text.Should().NotContain("\"JIT\"", "the function runs with jit = off: compiling cost far more than running");
            }
        }

        foreach (var text in pick)
        {
            var json = text[text.IndexOf('{', StringComparison.Ordinal)..];
            var nodes = new List<JsonElement>();
            Collect(JsonDocument.Parse(json).RootElement.GetProperty("Plan"), nodes);
            foreach (var lockRows in nodes.Where(n => n.GetProperty("Node Type").GetString() == "LockRows"))
            {
                var scan = new List<JsonElement>();
                Collect(lockRows, scan);
                scan.Select(n => n.GetProperty("Node Type").GetString()).Should().NotContain("Sort", text);
                scan.Should().Contain(n => n.GetProperty("Node Type").GetString() == "Index Scan"
                    && n.GetProperty("Index Name").GetString() == "workers_pick", text);
            }
        }
    }

    [Fact]
    public async Task AllocateBatch_OnAPoolTheStatisticsHaveNotSeen_ProbesActiveKeysThroughTheSessionIndex()
    {
        // Statistics taken while the table was empty; then a new pool gets 20,000 active
        // allocations, as a fresh pool does in a storm before autovacuum analyzes again.
        await PostgresTestDatabase.ExecuteAsync($"""ANALYZE "{Schema}".allocations; ANALYZE "{Schema}".allocation_history;""");
        await Store.UpsertPoolAsync("fresh", PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'fresh', 'w' || lpad(g::text, 4, '0'), 'h:' || g, 100, 20 FROM generate_series(1, 1000) g;
            INSERT INTO "{Schema}".allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
            SELECT gen_random_uuid(), 'fresh', 'w' || lpad((g % 1000 + 1)::text, 4, '0'), 'h', 'old-' || g, 1, g, now()
              FROM generate_series(1, 20000) g;
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), 'fresh', 'w0001', 'h', 'ended-' || g, 1, g, now(), NULL, now(), 'released'
              FROM generate_series(1, 20000) g;
            """);

        var plans = await ExplainNestedAsync("fresh", ["k1", "k2"]);

        var scans = plans.SelectMany(Nodes)
            .Where(n => n.TryGetProperty("Relation Name", out var r) && r.GetString() == "allocations" && n.GetProperty("Node Type").GetString() != "ModifyTable")
            .Select(n => n.GetProperty("Node Type").GetString() + " " + (n.TryGetProperty("Index Name", out var i) ? i.GetString() : ""))
            .ToList();
        scans.Should().NotBeEmpty();
        scans.Should().OnlyContain(s => s!.EndsWith("allocations_session", StringComparison.Ordinal),
            "which keys are active must be probed by key, never by scanning the pool's active allocations");
        var history = plans.SelectMany(Nodes)
            .Where(n => n.TryGetProperty("Relation Name", out var r) && r.GetString() == "allocation_history" && n.GetProperty("Node Type").GetString() != "ModifyTable")
            .Select(n => n.GetProperty("Node Type").GetString() + " " + (n.TryGetProperty("Index Name", out var i) ? i.GetString() : ""))
            .ToList();
        history.Should().NotBeEmpty("inserted keys are checked against the history (a release racing the insert)")
            .And.OnlyContain(s => s!.EndsWith("allocation_history_session_c", StringComparison.Ordinal), "the history is probed by key too, byte-wise (issue 20, #7)");

        // By key means the key is in the index condition, not a filter over the pool's entries.
        var conditions = plans.SelectMany(Nodes)
            .Where(n => n.TryGetProperty("Index Name", out var i) && i.GetString() is "allocations_session" or "allocation_history_session_c")
            .Select(n => (Cond: n.GetProperty("Index Cond").GetString()!, Filtered: n.TryGetProperty("Rows Removed by Filter", out var removed) ? removed.GetInt64() : 0))
            .ToList();
        conditions.Should().NotBeEmpty().And.OnlyContain(c => c.Cond.Contains("session_key", StringComparison.Ordinal) && c.Filtered == 0, string.Join("; ", conditions));
    }

    [Fact]
    public async Task ReleaseBatch_OnAPoolTheStatisticsHaveNotSeen_LooksEachAllocationUpByItsId()
    {
        // Statistics taken while one other pool filled the history (its most common values then
        // cover every row, so any other pool is estimated at one row); then a new pool ends 5,000
        // allocations before autovacuum analyzes again. Shown at 50 million rows (issue 24,
        // docs/benchmarks/history/2026-11-26-a-day-of-history.md): release_batch's answer looked
        // the history up by the pool's prefix of the session index and filtered the id, reading
        // every row the pool had ever ended (40,028 rows, 17 ms per release, growing with each one).
        await Store.UpsertPoolAsync("seen", PoolSettings.Default);
        await Store.UpsertPoolAsync("fresh", PoolSettings.Default);
        await Store.RegisterWorkersAsync("fresh", [new WorkerRegistration("w1", "h:1", 1_000)]);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), 'seen', 'w', 'h', 'seen-' || g, 1, g, now(), NULL, now(), 'released'
              FROM generate_series(1, 5000) g;
            ANALYZE "{Schema}".allocations; ANALYZE "{Schema}".allocation_history;
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), 'fresh', 'w1', 'h', 'ended-' || g, 1, g, now(), NULL, now(), 'released'
              FROM generate_series(1, 5000) g;
            INSERT INTO "{Schema}".allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
            SELECT gen_random_uuid(), 'fresh', 'gone', 'h', 'active-' || g, 1, g, now() FROM generate_series(1, 5000) g;
            """);

        // One session's plans as a pooled connection runs them: the first calls plan for their
        // values, later ones may keep doing so (PostgreSQL's plan cache chooses), so several.
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var plans = await WatchPlansAsync(connection, analyze: true);

        Guid lastEnded = default;
        for (var i = 0; i < 8; i++)
        {
            var allocated = (await Store.AllocateAsync("fresh", [new AllocationRequest($"k{i}")])).Single().Allocation!;
            lastEnded = allocated.AllocationId;
            await using var call = ReleaseCommand(connection, "fresh", [allocated.AllocationId], [allocated.Epoch]);
            await using var reader = await call.ExecuteReaderAsync();
            (await reader.ReadAsync()).Should().BeTrue();
            reader.GetString(1).Should().Be("released");
        }

        var released = plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)).SelectMany(Nodes).ToList();
        var reads = Reads(released, "allocation_history");
        var active = Reads(released, "allocations");
        active.Should().NotBeEmpty().And.OnlyContain(r => r.Rows + r.Filtered <= 1,
            "the active allocation is found by its id, never among the pool's 5,000 others: " + string.Join("; ", active));
        // GET of an ended allocation (get_allocation.sql) reads the history the same way.
        reads.AddRange(Reads(await ExplainAnalyzeAsync(connection, null, "get_allocation", "fresh", lastEnded), "allocation_history"));

        reads.Should().NotBeEmpty("each answer reads the ended allocation from the history")
            .And.OnlyContain(r => r.Scan.EndsWith("allocation_history_pkey", StringComparison.Ordinal) && r.Rows <= 1,
                "an allocation is found by its id, never among the pool's ended allocations: " + string.Join("; ", reads));
    }

    [Fact]
    public async Task AllocateAndReleaseBatches_WhereTheStatisticsSawTheHotTablesSmall_ReadThemByKeyOnly()
    {
        // A pool of 1,000 workers whose allocations table was last analyzed empty, as a quiet pool
        // is before a storm. Planned by those statistics, the active-key probe read `allocations`
        // whole once per request and both load updates read the pool whole, every dead row version
        // of it included: half of the functions' CPU at batches of 64 (issue 24).
        await Store.UpsertPoolAsync("hot", PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'hot', 'w' || lpad(g::text, 4, '0'), 'h:' || g, 1000, 0 FROM generate_series(1, 1000) g;
            ANALYZE "{Schema}".workers; ANALYZE "{Schema}".allocations;
            """);
        const int Batch = 64;
        for (var round = 0; round < 5; round++)
        {
            var made = await Store.AllocateAsync("hot", [.. Enumerable.Range(0, Batch).Select(i => new AllocationRequest($"churn-{round}-{i}"))]);
            await Store.ReleaseAsync("hot", [.. made.Select(o => new LeaseRelease(o.Allocation!.AllocationId, o.Allocation.Epoch))]);
        }

        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var plans = await WatchPlansAsync(connection, analyze: true);

        var allocated = await AllocateThenReleaseAsync(connection, "hot", [.. Enumerable.Range(0, Batch).Select(i => $"k{i}")]);

        allocated.Should().Be(Batch);
        var nodes = plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)).SelectMany(Nodes).ToList();
        foreach (var table in new[] { "allocations", "workers" })
        {
            var reads = Reads(nodes, table);
            reads.Should().NotBeEmpty()
                .And.OnlyContain(r => !r.Scan.StartsWith("Seq Scan", StringComparison.Ordinal) && r.Rows + r.Filtered <= Batch,
                    $"a batch of {Batch} reads the {table} rows of its keys, never the table or the pool whole: " + string.Join("; ", reads));
        }
    }

    [Fact]
    public async Task SmallBatches_RunPlansMadeOncePerSession_NotPlannedAgainOnEveryCall()
    {
        // Left to choose, PostgreSQL planned allocate_batch's set statement anew for each call of a
        // few requests (a custom plan for the batch's values looked cheaper than the generic one):
        // at batches of two, planning was 38% of the backend's CPU, and one allocate + release of
        // two took 2.3-2.4 ms at loopback instead of 1.3-1.4 ms (issue 24, pgbench, one client).
        // A custom plan shows the call's values as constants, a generic one as parameters.
        await Store.UpsertPoolAsync("small", PoolSettings.Default);
        await Store.RegisterWorkersAsync("small", [.. Enumerable.Range(1, 100).Select(i => new WorkerRegistration($"w{i:D3}", $"h:{i}", 1_000))]);

        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var plans = await WatchPlansAsync(connection, analyze: false);
        for (var round = 0; round < 8; round++)
        {
            (await AllocateThenReleaseAsync(connection, "small", [$"r{round}-a", $"r{round}-b"])).Should().Be(2);
        }

        // The statements inside the two functions (the session's own calls name the functions).
        var inside = plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)
            && !p.Contains(".allocate_batch(", StringComparison.Ordinal) && !p.Contains(".release_batch(", StringComparison.Ordinal)).ToList();
        var conditions = inside.SelectMany(Nodes)
            .Where(n => n.TryGetProperty("Relation Name", out _))
            .SelectMany(n => new[] { "Index Cond", "Filter" }.Where(c => n.TryGetProperty(c, out _)).Select(c => n.GetProperty(c).GetString()!))
            .Where(c => c.Contains("pool_id", StringComparison.Ordinal))
            .ToList();
        conditions.Should().HaveCountGreaterThan(8 * 4, "every call reads the pool's rows by pool_id")
            .And.OnlyContain(c => !c.Contains("'small'", StringComparison.Ordinal),
                "a plan made for one call's values is planned again for the next: " + string.Join("; ", conditions.Where(c => c.Contains("'small'", StringComparison.Ordinal)).Distinct()));
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)] // The plan a statement the store prepares may settle on (issue 24).
    public async Task SingleRenewGetAndRelease_WhereTheStatisticsSawAllocationsEmpty_ReadOneRowEach(bool generic)
    {
        // release.sql and renew.sql read `allocations` whole through its primary key to find the
        // one row their CTE had already locked, and all three went through the pool's entries of
        // allocations_session (issue 24: 17-20 ms per call at 20,000 active allocations).
        await AfterAQuietNightAsync("quiet");

        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var reads = new List<(string Statement, string Relation, (string Scan, double Rows, double Filtered) Read)>();
        static NpgsqlParameter Null(NpgsqlTypes.NpgsqlDbType type) => new() { Value = DBNull.Value, NpgsqlDbType = type };
        foreach (var (script, parameters) in new (string, Func<Guid, long, object[]>)[]
        {
            ("renew", (id, epoch) => ["quiet", id, epoch, Null(NpgsqlTypes.NpgsqlDbType.Bigint), Null(NpgsqlTypes.NpgsqlDbType.Text)]),
            ("get_allocation", (id, _) => ["quiet", id]),
            ("release", (id, epoch) => ["quiet", id, epoch, Schema + ".pool_changes"]),
        })
        {
            Guid id;
            long epoch;
            await using (var pick = new NpgsqlCommand($"""SELECT allocation_id, epoch FROM "{Schema}".allocations WHERE session_key = 'broker' || chr(31) || md5('active-1000')""", connection))
            await using (var row = await pick.ExecuteReaderAsync())
            {
                (await row.ReadAsync()).Should().BeTrue();
                (id, epoch) = (row.GetGuid(0), row.GetInt64(1));
            }

            var nodes = generic
                ? await ExplainAnalyzeGenericAsync(connection, null, script, parameters(id, epoch))
                : await ExplainAnalyzeAsync(connection, null, script, parameters(id, epoch));
            foreach (var relation in new[] { "allocations", "workers" })
            {
                reads.AddRange(Reads(nodes, relation).Select(r => (script, relation, r)));
            }
        }

        reads.Should().Contain(r => r.Statement == "release" && r.Relation == "workers", "a release frees its worker's units");
        reads.Should().OnlyContain(r => r.Read.Rows + r.Read.Filtered <= 1,
            "one allocation is renewed, read or released by its id, never found among the others: " + string.Join("; ", reads));
    }

    [Fact]
    public async Task AllocateBatch_AfterAQuietNight_ProbesEachKeyByItsKey()
    {
        // Shown (issue 24): the probe of which keys are active read allocations_worker with the
        // pool as its condition, the whole index once per key (128,000 entries for this batch),
        // and the probes of the history read allocation_history_ended_at, every row ended within
        // the retention once per key (2,048,000 for the batch, 32,000 for the single request).
        await AfterAQuietNightAsync("quiet");

        // Keys as brokers send them: the owner, U+001F, an id (issue 22).
        var keys = Enumerable.Range(0, 64).Select(i => $"broker\u001f{Guid.NewGuid():N}").ToArray();
        // A batch (the set statement) and a single request (the request-by-request loop).
        var plans = (await ExplainNestedAsync("quiet", keys)).Concat(await ExplainNestedAsync("quiet", [$"broker\u001f{Guid.NewGuid():N}"])).ToList();

        // Every index read of the two tables, the bitmap ones included (their index node names no table).
        var reads = plans.SelectMany(Nodes)
            .Where(n => n.TryGetProperty("Index Name", out var i) && i.GetString()!.StartsWith("allocation", StringComparison.Ordinal))
            .Select(n => (Index: n.GetProperty("Index Name").GetString()!, Rows: n.GetProperty("Actual Rows").GetDouble() * n.GetProperty("Actual Loops").GetDouble()))
            .ToList();
        reads.Should().NotBeEmpty()
            .And.OnlyContain(r => r.Rows <= keys.Length,
                "which keys are active, or ended within the retention, is probed by key, never by reading the pool's active or ended allocations once per key: " + string.Join("; ", reads));
    }

    [Fact]
    public async Task ReleaseBatch_AfterAQuietNight_ReadsTheRowsOfItsItemsOnly()
    {
        // Shown (issue 24): the winners' statement and the answer's joined the batch's ids to a
        // whole read of allocations' primary key (2,000 and 1,936 rows for these 64 releases).
        await AfterAQuietNightAsync("quiet");
        var ids = new List<Guid>();
        var epochs = new List<long>();
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        await using (var pick = new NpgsqlCommand($"""SELECT allocation_id, epoch FROM "{Schema}".allocations ORDER BY epoch LIMIT 64""", connection))
        await using (var row = await pick.ExecuteReaderAsync())
        {
            while (await row.ReadAsync())
            {
                ids.Add(row.GetGuid(0));
                epochs.Add(row.GetInt64(1));
            }
        }

        var plans = await WatchPlansAsync(connection, analyze: true);
        await using (var call = ReleaseCommand(connection, "quiet", [.. ids], [.. epochs]))
        {
            await using var reader = await call.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                reader.GetString(1).Should().Be("released");
            }
        }

        var nodes = plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)).SelectMany(Nodes).ToList();
        var reads = new[] { "allocations", "allocation_history", "workers" }.SelectMany(t => Reads(nodes, t).Select(r => (Table: t, r.Scan, r.Rows, r.Filtered))).ToList();
        reads.Should().NotBeEmpty()
            .And.OnlyContain(r => !r.Scan.StartsWith("Seq Scan", StringComparison.Ordinal) && r.Rows + r.Filtered <= ids.Count,
                "a batch of 64 releases reads its 64 allocations, their history rows and workers, never the tables: " + string.Join("; ", reads));
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Reap_AfterAQuietNight_ReadsTheExpiredAllocationsOnly(bool generic)
    {
        // Shown (issue 24): the reaper's DELETE joined the expired ids to a whole read of
        // allocations' primary key (2,000 rows to end 10), on every reap that found any.
        await AfterAQuietNightAsync("quiet");
        await PostgresTestDatabase.ExecuteAsync($"""
            UPDATE "{Schema}".allocations SET expires_at = now() - interval '1 minute' WHERE epoch <= 10;
            """);

        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        object[] parameters = [100, Schema + ".pool_changes", new NpgsqlParameter { Value = DBNull.Value, NpgsqlDbType = NpgsqlTypes.NpgsqlDbType.Text }];
        await using var transaction = await connection.BeginTransactionAsync();
        var nodes = generic
            ? await ExplainAnalyzeGenericAsync(connection, transaction, "reap_expired", parameters)
            : await ExplainAnalyzeAsync(connection, transaction, "reap_expired", parameters);
        await transaction.RollbackAsync();

        var reads = new[] { "allocations", "workers" }.SelectMany(t => Reads(nodes, t).Select(r => (Table: t, r.Scan, r.Rows, r.Filtered))).ToList();
        reads.Should().NotBeEmpty()
            .And.OnlyContain(r => r.Rows + r.Filtered <= 10,
                "a reap of 10 expired leases reads those 10 allocations and their workers, never all 2,000: " + string.Join("; ", reads));
    }

    [Fact]
    public async Task DeregisterWorker_AfterAQuietNight_ReadsThatWorkersAllocationsOnly()
    {
        await AfterAQuietNightAsync("quiet");

        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        var plans = await WatchPlansAsync(connection, analyze: true);
        await using (var call = new NpgsqlCommand(Store.Sql.Get("deregister_worker"), connection))
        {
            call.Parameters.Add(new NpgsqlParameter { Value = "quiet" });
            call.Parameters.Add(new NpgsqlParameter { Value = "w0005" });
            await using var reader = await call.ExecuteReaderAsync();
            (await reader.ReadAsync()).Should().BeTrue();
            reader.GetInt32(0).Should().Be(1);
            reader.GetInt32(1).Should().Be(2, "w0005 holds two of the 2,000 active allocations");
        }

        var nodes = plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal)).SelectMany(Nodes).ToList();
        var reads = Reads(nodes, "allocations");
        reads.Should().NotBeEmpty()
            .And.OnlyContain(r => r.Rows + r.Filtered <= 2,
                "a worker's allocations are found by the worker, never among the pool's 2,000: " + string.Join("; ", reads));
    }

    /// <summary>
    /// Pool <paramref name="pool"/> of 1,000 workers with 2,000 active allocations, over statistics
    /// taken after a quiet night: every allocation had ended (the table's pages there, its rows
    /// not) and the history had been purged, then a morning's storm before the next ANALYZE. The
    /// planner then estimates `allocations` and `allocation_history` at one row whatever they hold
    /// (no rows over some pages), and any index that names a column of the condition looks as
    /// cheap as the one that finds the row.
    /// </summary>
    private async Task AfterAQuietNightAsync(string pool)
    {
        await Store.UpsertPoolAsync(pool, PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            ALTER TABLE "{Schema}".allocations SET (autovacuum_enabled = off);
            ALTER TABLE "{Schema}".allocation_history SET (autovacuum_enabled = off);
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT '{pool}', 'w' || lpad(g::text, 4, '0'), 'h:' || g, 100, 2 FROM generate_series(1, 1000) g;
            INSERT INTO "{Schema}".allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
            SELECT gen_random_uuid(), 'yesterday', 'w0001', 'h', 'broker' || chr(31) || md5('night-' || g), 1, g, now() FROM generate_series(1, 30000) g;
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), 'yesterday', 'w0001', 'h', 'broker' || chr(31) || md5('purged-' || g), 1, g, now(), NULL, now(), 'released' FROM generate_series(1, 30000) g;
            ANALYZE "{Schema}".allocations; ANALYZE "{Schema}".allocation_history;
            DELETE FROM "{Schema}".allocations; DELETE FROM "{Schema}".allocation_history;
            ANALYZE "{Schema}".workers; ANALYZE "{Schema}".allocations; ANALYZE "{Schema}".allocation_history;
            INSERT INTO "{Schema}".allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
            SELECT gen_random_uuid(), '{pool}', 'w' || lpad((g % 1000 + 1)::text, 4, '0'), 'h', 'broker' || chr(31) || md5('active-' || g), 1, g, now()
              FROM generate_series(1, 2000) g;
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), '{pool}', 'w0001', 'h', 'broker' || chr(31) || md5('morning-' || g), 1, g, now(), NULL, now(), 'released' FROM generate_series(1, 2000) g;
            """);
    }

    /// <summary>Every read of <paramref name="relation"/> in the plan nodes: how, the rows it returned over all its loops, and the rows its filter dropped.</summary>
    private static List<(string Scan, double Rows, double Filtered)> Reads(IEnumerable<JsonElement> nodes, string relation) =>
        [.. nodes
            .Where(n => n.TryGetProperty("Relation Name", out var r) && r.GetString() == relation && n.GetProperty("Node Type").GetString() != "ModifyTable")
            .Select(n => (n.GetProperty("Node Type").GetString() + " " + (n.TryGetProperty("Index Name", out var x) ? x.GetString() : ""),
                          n.GetProperty("Actual Rows").GetDouble() * n.GetProperty("Actual Loops").GetDouble(),
                          n.TryGetProperty("Rows Removed by Filter", out var f) ? f.GetDouble() : 0))];

    /// <summary>
    /// Runs the store's <paramref name="script"/> under EXPLAIN ANALYZE (so it really executes) and
    /// returns its plan's nodes; an <see cref="NpgsqlParameter"/> among <paramref name="values"/> is
    /// passed as it is (a typed NULL), anything else as a value.
    /// </summary>
    private async Task<List<JsonElement>> ExplainAnalyzeAsync(NpgsqlConnection connection, NpgsqlTransaction? transaction, string script, params object[] values)
    {
        await using var explain = new NpgsqlCommand("EXPLAIN (ANALYZE, FORMAT JSON) " + Store.Sql.Get(script), connection, transaction);
        foreach (var value in values)
        {
            explain.Parameters.Add(value as NpgsqlParameter ?? new NpgsqlParameter { Value = value });
        }

        return PlanNodes((string)(await explain.ExecuteScalarAsync())!);
    }

    /// <summary>Every node of an EXPLAIN (FORMAT JSON) plan.</summary>
    private static List<JsonElement> PlanNodes(string json)
    {
        var nodes = new List<JsonElement>();
        Collect(JsonDocument.Parse(json).RootElement[0].GetProperty("Plan"), nodes);
        return nodes;
    }

    /// <summary>
    /// As <see cref="ExplainAnalyzeAsync"/>, for the generic plan: the store's data source prepares
    /// its statements (issue 24), and PostgreSQL may settle a prepared statement on the plan made
    /// without the call's values. The script is prepared and executed under EXPLAIN ANALYZE with
    /// plan_cache_mode = force_generic_plan (the connection is reset when returned to its pool).
    /// </summary>
    private async Task<List<JsonElement>> ExplainAnalyzeGenericAsync(NpgsqlConnection connection, NpgsqlTransaction? transaction, string script, params object[] values)
    {
        await using (var prepare = new NpgsqlCommand($"SET plan_cache_mode = force_generic_plan; PREPARE generic_plan AS {Store.Sql.Get(script).TrimEnd().TrimEnd(';')}", connection, transaction))
        {
            await prepare.ExecuteNonQueryAsync();
        }

        // EXECUTE's arguments cannot be the protocol's parameters: literals, which the generic plan never sees.
        static string Literal(object value) => value switch
        {
            NpgsqlParameter { Value: DBNull } => "NULL",
            string text => "'" + text.Replace("'", "''", StringComparison.Ordinal) + "'",
            Guid id => $"'{id}'",
            _ => Convert.ToString(value, System.Globalization.CultureInfo.InvariantCulture)!,
        };
        await using var explain = new NpgsqlCommand($"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE generic_plan({string.Join(", ", values.Select(Literal))})", connection, transaction);
        var json = (string)(await explain.ExecuteScalarAsync())!;
        await using (var deallocate = new NpgsqlCommand("DEALLOCATE generic_plan", connection, transaction))
        {
            await deallocate.ExecuteNonQueryAsync();
        }

        json.Should().MatchRegex(@"\$\d", "a generic plan names the parameters, a custom one their values");
        return PlanNodes(json);
    }

    /// <summary>The JSON plans auto_explain reports for the statements inside one allocate_batch call.</summary>
    private async Task<List<string>> ExplainNestedAsync(string pool, string[] keys)
    {
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        // The generic plan, the one a pooled connection ends up running.
        var plans = await WatchPlansAsync(connection, analyze: true, "SET plan_cache_mode = force_generic_plan");

        await using (var call = AllocateCommand(connection, pool, keys))
        {
            await using var reader = await call.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                reader.GetString(1).Should().Be("allocated");
            }
        }

        return [.. plans.Where(p => p.Contains("\"Plan\"", StringComparison.Ordinal))];
    }

    /// <summary>
    /// Has auto_explain report, as notices on <paramref name="connection"/>, the JSON plan of every
    /// statement it runs from now on, the functions' own included; returns the list they gather in.
    /// </summary>
    private static async Task<List<string>> WatchPlansAsync(NpgsqlConnection connection, bool analyze, string settings = "")
    {
        var plans = new List<string>();
        connection.Notice += (_, e) => plans.Add(e.Notice.MessageText);
        await using var setup = new NpgsqlCommand(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; " +
            $"SET auto_explain.log_format = 'json'; SET auto_explain.log_analyze = {(analyze ? "on" : "off")}; SET client_min_messages = log; " + settings,
            connection);
        await setup.ExecuteNonQueryAsync();
        return plans;
    }

    /// <summary>The store's skip-locked allocation of one unit per key, no tags, as the pool grain sends it.</summary>
    private NpgsqlCommand AllocateCommand(NpgsqlConnection connection, string pool, string[] keys)
    {
        var call = new NpgsqlCommand(Store.Sql.Get("allocate_skip_locked"), connection);
        call.Parameters.Add(new NpgsqlParameter { Value = pool });
        call.Parameters.Add(new NpgsqlParameter { Value = keys });
        call.Parameters.Add(new NpgsqlParameter { Value = keys.Select(_ => 1).ToArray() });
        call.Parameters.Add(new NpgsqlParameter { Value = "[" + string.Join(",", keys.Select(_ => "[]")) + "]", NpgsqlDbType = NpgsqlTypes.NpgsqlDbType.Jsonb });
        call.Parameters.Add(new NpgsqlParameter { Value = keys.Select(_ => (long?)null).ToArray() });
        call.Parameters.Add(new NpgsqlParameter { Value = (long)TimeSpan.FromHours(24).TotalMilliseconds });
        call.Parameters.Add(new NpgsqlParameter { Value = keys.Select(_ => (long?)null).ToArray() });
        return call;
    }

    /// <summary>Allocates <paramref name="keys"/> in one call and releases them in another, each answer checked; returns how many were allocated.</summary>
    private async Task<int> AllocateThenReleaseAsync(NpgsqlConnection connection, string pool, string[] keys)
    {
        var ids = new List<Guid>();
        var epochs = new List<long>();
        await using (var call = AllocateCommand(connection, pool, keys))
        {
            await using var reader = await call.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                reader.GetString(1).Should().Be("allocated");
                ids.Add(reader.GetGuid(2));
                epochs.Add(reader.GetInt64(7));
            }
        }

        await using (var call = ReleaseCommand(connection, pool, [.. ids], [.. epochs]))
        {
            await using var reader = await call.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                reader.GetString(1).Should().Be("released");
            }
        }

        return ids.Count;
    }

    /// <summary>The store's batch release of <paramref name="ids"/>, by anyone (no owners).</summary>
    private NpgsqlCommand ReleaseCommand(NpgsqlConnection connection, string pool, Guid[] ids, long[] epochs)
    {
        var call = new NpgsqlCommand(Store.Sql.Get("release_batch"), connection);
        call.Parameters.Add(new NpgsqlParameter { Value = pool });
        call.Parameters.Add(new NpgsqlParameter { Value = ids });
        call.Parameters.Add(new NpgsqlParameter { Value = epochs });
        call.Parameters.Add(new NpgsqlParameter { Value = Schema + ".pool_changes" });
        call.Parameters.Add(new NpgsqlParameter { Value = ids.Select(_ => (string?)null).ToArray() });
        return call;
    }

    private static List<JsonElement> Nodes(string planNotice)
    {
        var nodes = new List<JsonElement>();
        Collect(JsonDocument.Parse(planNotice[planNotice.IndexOf('{', StringComparison.Ordinal)..]).RootElement.GetProperty("Plan"), nodes);
        return nodes;
    }

    private static void Collect(JsonElement node, List<JsonElement> into)
    {
        into.Add(node);
        if (node.TryGetProperty("Plans", out var children))
        {
            foreach (var child in children.EnumerateArray())
            {
                Collect(child, into);
            }
        }
    }
}
