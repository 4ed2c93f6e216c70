using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Allocator.Testing;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// Issue 12's store-side defects against a real PostgreSQL, each reproduced by injecting the
/// fault (a killed backend, a held row lock) and failing before its fix.
/// </summary>
public sealed class FaultTests : PostgresStoreTestBase
{
    protected override void Configure(PostgresWorkerStoreOptions options)
    {
        options.LockTimeout = TimeSpan.FromSeconds(20);
        options.CommandTimeout = TimeSpan.FromSeconds(40);
        options.SkipRetries = 1;
    }

    [Fact]
    public async Task BlockingFallbackConnectionKilled_AfterTheFirstStatementCommitted_ReportsTheCommittedWork()
    {
        // w000 has room for one; w001 is held by another transaction. The first (skip-locked)
        // statement allocates "a" on w000 and commits; "b" finds only w001, locked, and ends in
        // the blocking fallback, whose backend is then terminated.
        await CreatePoolAsync("p", workers: 2, capacity: 1);
        await using var held = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w001");
        var early = new ConcurrentDictionary<int, AllocationOutcome>();
        var call = Store.AllocateAsync("p", [new AllocationRequest("a"), new AllocationRequest("b")], (i, o) => early[i] = o, CancellationToken.None);

        await WaitUntilAsync(() => Task.FromResult(early.ContainsKey(0)), "request a to be reported as soon as its statement committed");
        call.IsCompleted.Should().BeFalse("b still waits for w001 in the blocking fallback");
        early[0].Status.Should().Be(AllocationStatus.Allocated);
        await KillBlockedAllocationAsync();

        var outcomes = await call.WaitAsync(TimeSpan.FromSeconds(30));

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated, "committed work is reported, never thrown away (#1)");
        outcomes[0].Allocation!.AllocationId.Should().Be(early[0].Allocation!.AllocationId);
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable);
        outcomes[1].OutcomeUnknown.Should().BeTrue("the failed statement's connection broke: it may have committed");
        early.Should().HaveCount(2, "every request is reported exactly once");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task ConnectionKilledDuringTheOnlyStatement_IsUnavailableWithOutcomeUnknown_NotARawDatabaseError()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 1, new PoolSettings { Strategy = AllocationStrategy.Strict });
        await using var held = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w000");
        var call = Store.AllocateAsync("p", [new AllocationRequest("a")]);
        await KillBlockedAllocationAsync();

        var error = (await FluentActions.Awaiting(() => call.WaitAsync(TimeSpan.FromSeconds(30))).Should().ThrowAsync<AllocatorException>()).Which;

        error.Kind.Should().Be(AllocatorErrorKind.Unavailable, "a dropped connection is 'unavailable', never a raw error (a 500) (#2)");
        error.OutcomeUnknown.Should().BeTrue();
    }

    [Fact]
    public async Task RequestPastItsDeadline_StartsNoRetryOrFallback_AndIsAnsweredNothingWritten()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 1);
        await using var held = await PostgresTestDatabase.HoldRowLockAsync(Schema, "p", "w001");
        var past = TimeProvider.System.GetUtcNow() - TimeSpan.FromSeconds(1);
        using var lateness = SchedulingDelay.Start();
        var watch = Stopwatch.StartNew();

        var outcomes = await Store.AllocateAsync("p", [new AllocationRequest("a", Deadline: past), new AllocationRequest("b", Deadline: past)])
            .WaitAsync(TimeSpan.FromSeconds(60));
        var took = watch.Elapsed;

        outcomes[0].Status.Should().Be(AllocationStatus.Allocated, "the first statement runs whatever the deadline");
        outcomes[1].Status.Should().Be(AllocationStatus.Unavailable, "no retry and no blocking fallback for a request past its deadline");
        outcomes[1].OutcomeUnknown.Should().BeFalse("nothing was written for it");

        // The promise: one statement, no lock wait. Two seconds for it, plus what the machine kept
        // this process waiting; a blocking fallback would wait for the held row's 20 s lock timeout.
        took.Should().BeLessThan(
            lateness.Bound(promise: TimeSpan.Zero, allowance: TimeSpan.FromSeconds(2), defect: TimeSpan.FromSeconds(20)),
            "the 20 s lock wait of the fallback never started ({0})", lateness);
    }

    [Fact]
    public async Task OwnDataSource_SetsAServerSideStatementTimeout_BetweenTheLockAndTheCommandTimeouts()
    {
        await using var store = await PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions
        {
            ConnectionString = PostgresTestDatabase.ConnectionString,
            Schema = Schema,
            LockTimeout = TimeSpan.FromSeconds(2),
            CommandTimeout = TimeSpan.FromSeconds(5),
        });
        await using var command = store.DataSource.CreateCommand("SHOW statement_timeout");

        ((string)(await command.ExecuteScalarAsync())!).Should().Be("3500ms", "a statement the client gave up on must not commit later (#2)");
    }

    [Fact]
    public async Task StrictBatchesOfMixedUnits_RunConcurrently_NeverDeadlock()
    {
        // Deadlocks are not retried here: each one would fail requests outright (#6).
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.TransientRetries = 0;
            o.LockTimeout = TimeSpan.FromSeconds(20);
            o.CommandTimeout = TimeSpan.FromSeconds(40);
            o.ApplyMigrations = false;
        });
        await CreatePoolAsync("p", workers: 6, capacity: 200, new PoolSettings { Strategy = AllocationStrategy.Strict });
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var batches = Enumerable.Range(0, 8).Select(b => Task.Run(async () =>
        {
            await start.Task;
            var outcomes = new List<AllocationOutcome>();
            for (var round = 0; round < 4; round++)
            {
                outcomes.AddRange(await store.AllocateAsync("p", [.. Enumerable.Range(0, 8).Select(i => new AllocationRequest($"b{b}-r{round}-{i}", Units: 1 + (i + b) % 3))]));
            }

            return outcomes;
        })).ToList();
        start.SetResult();

        var all = (await Task.WhenAll(batches).WaitAsync(TimeSpan.FromSeconds(120))).SelectMany(o => o).ToList();

        all.Should().HaveCount(256).And.OnlyContain(o => o.Status == AllocationStatus.Allocated, "capacity suffices; a deadlock would have failed requests");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task ConcurrentInsertOfTheKey_EndedBeforeTheReRead_AnswersItsOutcome_NeverANullId()
    {
        // #10, made deterministic with test-only triggers that hold allocate_batch inside its
        // statement: after it picked w000 (load up) and after the insert lost the key (load down).
        await CreatePoolAsync("p", workers: 2, capacity: 5);
        await PostgresTestDatabase.ExecuteAsync($"""
            CREATE FUNCTION "{Schema}".hold_w000() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.worker_id = 'w000' AND NEW.load <> OLD.load THEN PERFORM pg_sleep(1.5); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER hold_w000 BEFORE UPDATE ON "{Schema}".workers FOR EACH ROW EXECUTE FUNCTION "{Schema}".hold_w000();
            """);
        var ours = Store.AllocateAsync("p", [new AllocationRequest("k")]);

        // While ours holds w000 (load up, 1.5 s): another allocation of the same key commits on w001.
        await Task.Delay(500);
        var theirs = (await Store.AllocateAsync("p", [new AllocationRequest("k")]))[0];
        theirs.Status.Should().Be(AllocationStatus.Allocated);
        theirs.Allocation!.WorkerId.Should().Be("w001", "w000 is locked by ours");

        // Ours now inserts, loses the key, and undoes its load (another 1.5 s): meanwhile theirs is released.
        await Task.Delay(1500);
        (await Store.ReleaseAsync("p", theirs.Allocation.AllocationId, theirs.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var outcome = (await ours.WaitAsync(TimeSpan.FromSeconds(30)))[0];

        outcome.Status.Should().Be(AllocationStatus.Existing, "the key's outcome is the allocation that won, now ended");
        outcome.Allocation!.AllocationId.Should().Be(theirs.Allocation.AllocationId);
        outcome.Allocation.IsActive.Should().BeFalse();
        await PostgresTestDatabase.ExecuteAsync($"""DROP TRIGGER hold_w000 ON "{Schema}".workers""");
        await AssertLoadMatchesAllocationsAsync("p");
    }

    [Fact]
    public async Task ReapersReleaseBatchesAndDeregistrations_Concurrently_NeverDeadlock()
    {
        // #9: with deadlock retries off, any lock-order inversion between the reaper, batched
        // release and deregistration fails a call.
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.TransientRetries = 0;
            o.ApplyMigrations = false;
        });
        for (var round = 0; round < 3; round++)
        {
            var pool = $"p{round}";
            await store.UpsertPoolAsync(pool, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(5) });
            await store.RegisterWorkersAsync(pool, [.. Enumerable.Range(0, 12).Select(i => new WorkerRegistration($"w{i:D2}", "a", 400))]);
            var allocations = new List<Allocation>();
            for (var b = 0; b < 12; b++)
            {
                allocations.AddRange((await store.AllocateAsync(pool, [.. Enumerable.Range(0, 100).Select(i => new AllocationRequest($"{pool}-{b}-{i}"))])).Select(o => o.Allocation!));
            }

            // Half of them expired: reapers and releases go after the same rows and workers.
            await PostgresTestDatabase.ExecuteAsync($"UPDATE \"{Schema}\".allocations SET expires_at = now() - interval '1 second' WHERE pool_id = $1 AND (hashtext(session_key) & 1) = 0", pool);
            var random = new Random(round);
            var shuffled = allocations.OrderBy(_ => random.Next()).ToList();
            var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            var tasks = new List<Task>();
            tasks.AddRange(Enumerable.Range(0, 3).Select(_ => Task.Run(async () =>
            {
                await start.Task;
                while ((await store.ReapExpiredAsync(40)).Count > 0)
                {
                }
            })));
            tasks.AddRange(Enumerable.Range(0, 4).Select(r => Task.Run(async () =>
            {
                await start.Task;
                foreach (var chunk in shuffled.Where((_, i) => i % 4 == r).Chunk(30))
                {
                    await store.ReleaseAsync(pool, [.. chunk.Select(a => new LeaseRelease(a.AllocationId, a.Epoch))]);
                }
            })));
            tasks.Add(Task.Run(async () =>
            {
                await start.Task;
                foreach (var worker in Enumerable.Range(0, 12).Where(i => i % 3 == 0))
                {
                    await store.DeregisterWorkerAsync(pool, $"w{worker:D2}");
                }
            }));
            start.SetResult();

            await Task.WhenAll(tasks).WaitAsync(TimeSpan.FromSeconds(60));
            await AssertLoadMatchesAllocationsAsync(pool);
        }
    }

    [Fact]
    public async Task ListenerReconnect_RaisesACatchUpForEveryPool_WithoutANewNotification()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.ListenReconnectDelay = TimeSpan.FromMilliseconds(50);
            o.ApplyMigrations = false;
        });
        var received = new ConcurrentQueue<PoolChanged>();
        using var subscription = store.Subscribe(received.Enqueue);
        await store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        // Notifications sent while the listener is down are lost; the reconnect must make up for them (#8).
        await using (var kill = PostgresTestDatabase.DataSource.CreateCommand(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()"))
        {
            kill.Parameters.Add(new NpgsqlParameter { Value = Schema });
            ((long)(await kill.ExecuteScalarAsync())!).Should().BeGreaterThan(0);
        }

        await WaitUntilAsync(() => Task.FromResult(received.Contains(new PoolChanged("p", PoolChangeKind.CapacityAvailable))
            && received.Contains(new PoolChanged("p", PoolChangeKind.SettingsChanged))), "the catch-up after the listener reconnected");
    }

    [Fact]
    public async Task ConnectionPoolExhausted_TheWaitEndsWithinTheCommandTimeout_AsUnavailable()
    {
        var connectionString = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { MaxPoolSize = 1 }.ConnectionString;
        await using var store = await PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions
        {
            ConnectionString = connectionString,
            Schema = Schema,
            LockTimeout = TimeSpan.FromMilliseconds(500),
            CommandTimeout = TimeSpan.FromSeconds(2),
            ListenForChanges = false,
            ApplyMigrations = false,
            TransientRetries = 0,
        });
        await using var hog = await store.DataSource.OpenConnectionAsync(); // the pool's only connection
        using var lateness = SchedulingDelay.Start();
        var watch = Stopwatch.StartNew();

        var error = (await FluentActions.Awaiting(() => store.GetWorkersAsync("p")).Should().ThrowAsync<AllocatorException>()).Which;
        var took = watch.Elapsed;

        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);

        // The promise: the 2 s command timeout bounds the wait for a connection. Two seconds more,
        // plus what the machine kept this process waiting; without it the wait would be the
        // driver's 15 s connection timeout.
        took.Should().BeLessThan(
            lateness.Bound(promise: TimeSpan.FromSeconds(2), allowance: TimeSpan.FromSeconds(2), defect: TimeSpan.FromSeconds(15)),
            "the wait for a connection must not outlive the 2 s command timeout by much, let alone the caller (#7; {0})", lateness);
    }

    [Fact]
    public async Task RenewWithoutALease_RetriedAcrossRefusedConnections_IsAnswered_NotAnInvalidOperation()
    {
        // A PostgreSQL restart as the service sees it: connections are refused for a moment, and
        // the store retries (nothing was written). Each attempt must build its command afresh:
        // reusing the first attempt's parameters threw "The parameter already belongs to a
        // collection", a 500, in the pg-restart-immediate fault scenario.
        await CreatePoolAsync("p", workers: 1, capacity: 1);
        var allocated = (await Store.AllocateAsync("p", [new AllocationRequest("a", Lease: TimeSpan.FromMinutes(5))]))[0].Allocation!;
        var target = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString);
        using var refusing = new TcpListener(IPAddress.Loopback, 0);
        refusing.Start();
        var port = ((IPEndPoint)refusing.LocalEndpoint).Port;
        refusing.Stop(); // nothing listens on the port until the forwarder starts: connections are refused
        var connectionString = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { Host = "127.0.0.1", Port = port, Pooling = false }.ConnectionString;
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.DataSource = null;
            o.ConnectionString = connectionString;
            o.ApplyMigrations = false;
            o.ListenForChanges = false;
            o.TransientRetries = 100;
            o.RetryJitter = TimeSpan.FromMilliseconds(40);
        });

        var renew = store.RenewAsync("p", allocated.AllocationId, allocated.Epoch, lease: null);
        await Task.Delay(TimeSpan.FromMilliseconds(300));
        if (renew.IsFaulted)
        {
            await renew; // the error of the retry that failed
        }

        renew.IsCompleted.Should().BeFalse("every attempt so far was refused and retried");
        using var cancel = new CancellationTokenSource();
        var forwarder = ForwardAsync(port, target.Host!, target.Port, cancel.Token);

        var result = await renew.WaitAsync(TimeSpan.FromSeconds(30));

        result.Status.Should().Be(LeaseStatus.Ok);
        await cancel.CancelAsync();
        await forwarder;
    }

    /// <summary>Accepts on <paramref name="port"/> and pipes each connection to PostgreSQL until cancelled.</summary>
    private static async Task ForwardAsync(int port, string host, int targetPort, CancellationToken cancellationToken)
    {
        var listener = new TcpListener(IPAddress.Loopback, port);
        listener.Start();
        var pipes = new List<Task>();
        try
        {
            while (true)
            {
                var client = await listener.AcceptTcpClientAsync(cancellationToken);
                pipes.Add(Task.Run(async () =>
                {
                    using (client)
                    using (var server = new TcpClient())
                    {
                        await server.ConnectAsync(host, targetPort, cancellationToken);
                        using var pipe = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
                        var up = client.GetStream().CopyToAsync(server.GetStream(), pipe.Token);
                        var down = server.GetStream().CopyToAsync(client.GetStream(), pipe.Token);
                        await Task.WhenAny(up, down);
                        await pipe.CancelAsync();
                    }
                }, CancellationToken.None));
            }
        }
        catch (OperationCanceledException)
        {
        }
        finally
        {
            listener.Stop();
        }

        await Task.WhenAll(pipes.Select(p => p.ContinueWith(_ => { }, TaskScheduler.Default)));
    }

    /// <summary>Terminates the backend of an allocation statement that waits for a row lock.</summary>
    private async Task KillBlockedAllocationAsync()
    {
        var killed = 0L;
        await WaitUntilAsync(async () =>
        {
            await using var command = PostgresTestDatabase.DataSource.CreateCommand(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity " +
                "WHERE query LIKE '%allocate_batch%' AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()");
            command.Parameters.Add(new NpgsqlParameter { Value = Schema });
            killed = (long)(await command.ExecuteScalarAsync())!;
            return killed > 0;
        }, "an allocation statement of this schema to wait for the held row lock, to terminate it");
    }

    private static async Task WaitUntilAsync(Func<Task<bool>> condition, string what)
    {
        var watch = Stopwatch.StartNew();
        while (!await condition())
        {
            if (watch.Elapsed > TimeSpan.FromSeconds(20))
            {
                throw new TimeoutException($"Timed out waiting for {what}.");
            }

            await Task.Delay(20);
        }
    }
}
