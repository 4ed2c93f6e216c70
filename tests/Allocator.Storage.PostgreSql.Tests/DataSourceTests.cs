using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class DataSourceTests : PostgresStoreTestBase
{
    [Fact]
    public async Task DisposeAsync_CalledTwice_DoesNotThrow()
    {
        var store = (PostgresWorkerStore)await PostgresTestDatabase.CreateStoreAsync(Schema, _ => { });
        await store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        await store.DisposeAsync();
        var again = async () => await store.DisposeAsync();

        await again.Should().NotThrowAsync();
    }

    [Theory]
    [InlineData("", "kept")]
    [InlineData(";No Reset On Close=false", "reset")]
    public async Task BuildDataSource_PooledConnectionReused_KeepsSessionStateUnlessTheConnectionStringAsksForReset(string suffix, string expected)
    {
        // One physical connection, so the second open gets the one the first returned.
        var connectionString = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { MaxPoolSize = 1 }.ConnectionString + suffix;
        await using var dataSource = PostgresWorkerStore.BuildDataSource(connectionString);
        int firstPid;
        await using (var first = await dataSource.OpenConnectionAsync())
        {
            await using var set = new NpgsqlCommand("SET application_name = 'kept'; SELECT pg_backend_pid()", first);
            firstPid = (int)(await set.ExecuteScalarAsync())!;
        }

        await using var second = await dataSource.OpenConnectionAsync();
        await using var show = new NpgsqlCommand("SELECT pg_backend_pid(), current_setting('application_name')", second);
        await using var reader = await show.ExecuteReaderAsync();
        (await reader.ReadAsync()).Should().BeTrue();

        reader.GetInt32(0).Should().Be(firstPid, "the pool hands back the same physical connection");
        (reader.GetString(1) == "kept" ? "kept" : "reset").Should().Be(expected,
            "DISCARD ALL on reuse would also drop the PL/pgSQL plans allocate_batch caches per session");
    }

    [Theory]
    [InlineData("", 1)]
    [InlineData(";Max Auto Prepare=0", 0)]
    public async Task BuildDataSource_StatementRunTwice_IsPreparedOnItsConnectionUnlessTheConnectionStringSaysOtherwise(string suffix, long expected)
    {
        var connectionString = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { MaxPoolSize = 1 }.ConnectionString + suffix;
        await using var dataSource = PostgresWorkerStore.BuildDataSource(connectionString);
        for (var i = 0; i < 2; i++)
        {
            await using var run = dataSource.CreateCommand("SELECT count(*) FROM pg_class WHERE relname = $1");
            run.Parameters.Add(new NpgsqlParameter { Value = "pg_class" });
            await run.ExecuteScalarAsync();
        }

        await using var count = dataSource.CreateCommand("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT count(*) FROM pg_class%'");
        ((long)(await count.ExecuteScalarAsync())!).Should().Be(expected,
            "a statement prepared on its connection skips parsing and planning on every later call (issue 24)");
    }

    [Fact]
    public async Task PreparedStatement_WhoseResultTypeASchemaChangeAltered_RunsAgainPreparedAfresh()
    {
        // Shown (issue 24): a migration that alters a statement's result type (here the type of
        // a column it reads, as the next build's migration may during a rolling upgrade) fails
        // the next use of that statement on every connection that had prepared it (0A000, "cached
        // plan must not change result type"), where an unprepared statement simply runs.
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        var oneConnection = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { MaxPoolSize = 1 }.ConnectionString;
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.DataSource = null;
            o.ConnectionString = oneConnection;
            o.ListenDataSource = PostgresTestDatabase.DataSource;
            o.ApplyMigrations = false;
        });
        for (var i = 0; i < 3; i++)
        {
            (await store.GetWorkerAsync("p", "w000"))!.Address.Should().Be("10.0.0.0:7000");
        }

        await PostgresTestDatabase.ExecuteAsync($"""ALTER TABLE "{Schema}".workers ALTER COLUMN address TYPE varchar(300)""");

        (await store.GetWorkerAsync("p", "w000"))!.Address.Should().Be("10.0.0.0:7000");
    }

    [Theory]
    [InlineData(";Maximum Pool Size=16", 16)]
    [InlineData("", 100)] // Npgsql's default
    [InlineData(";Maximum Pool Size=16;Multiplexing=true", null)]
    [InlineData(";Pooling=false", null)]
    public async Task ConnectionLimit_IsTheDataSourcesPoolSize_UnlessItsStatementsHoldNoConnectionEach(string suffix, int? expected)
    {
        var connectionString = PostgresTestDatabase.ConnectionString + suffix;
        await using var dataSource = NpgsqlDataSource.Create(connectionString);
        await using var store = new PostgresWorkerStore(new PostgresWorkerStoreOptions { DataSource = dataSource, Schema = Schema });

        ((IWorkerStore)store).ConnectionLimit.Should().Be(expected);
    }

    [Fact]
    public async Task MultiplexingDataSource_AllocatesAndReceivesNotifications()
    {
        await CreatePoolAsync("p", workers: 2, capacity: 5);
        // Built as the store builds its own, so its statements are prepared too.
        var builder = new NpgsqlConnectionStringBuilder(PostgresTestDatabase.ConnectionString) { Multiplexing = true };
        await using var multiplexing = PostgresWorkerStore.BuildDataSource(builder.ConnectionString);
        await using var store = await PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions { DataSource = multiplexing, Schema = Schema });

        var changed = new TaskCompletionSource<PoolChanged>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = store.Subscribe(c => changed.TrySetResult(c));
        await store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        // Three times: from the second, the statements run prepared.
        for (var i = 0; i < 3; i++)
        {
            var outcome = (await store.AllocateAsync("p", [new AllocationRequest($"s{i}")]))[0];
            outcome.Status.Should().Be(AllocationStatus.Allocated);
            (await store.ReleaseAsync("p", outcome.Allocation!.AllocationId, outcome.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        }

        (await changed.Task.WaitAsync(TimeSpan.FromSeconds(10))).Should().Be(new PoolChanged("p", PoolChangeKind.CapacityAvailable));
    }

    [Fact]
    public async Task OtherInstance_SeesReleaseThroughNotify_AndSettingsChangeDropsItsCache()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        await using var other = await PostgresTestDatabase.CreateStoreAsync(Schema, o => o.SettingsCacheDuration = TimeSpan.FromHours(1));
        (await other.GetPoolAsync("p"))!.Settings.Strategy.Should().Be(AllocationStrategy.SkipLocked);
        var settingsChanged = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var subscription = other.Subscribe(c =>
        {
            if (c.Kind == PoolChangeKind.SettingsChanged)
            {
                settingsChanged.TrySetResult();
            }
        });
        await other.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        await Store.UpsertPoolAsync("p", new PoolSettings { Strategy = AllocationStrategy.Strict });
        await settingsChanged.Task.WaitAsync(TimeSpan.FromSeconds(10));
        (await other.GetPoolAsync("p"))!.Settings.Strategy.Should().Be(AllocationStrategy.Strict, "the notification dropped the hour-long cache");
    }

    [Fact]
    public async Task Listener_ConnectionKilled_ReconnectsAndDeliversAgain()
    {
        await CreatePoolAsync("p", workers: 1, capacity: 5);
        await using var store = await PostgresTestDatabase.CreateStoreAsync(Schema, o =>
        {
            o.ListenReconnectDelay = TimeSpan.FromMilliseconds(50);
            o.ApplyMigrations = false;
        });
        var received = 0;
        using var subscription = store.Subscribe(_ => Interlocked.Increment(ref received));
        await store.WaitForListenerAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(10));

        await using (var kill = PostgresTestDatabase.DataSource.CreateCommand(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()"))
        {
            kill.Parameters.Add(new NpgsqlParameter { Value = Schema });
            ((long)(await kill.ExecuteScalarAsync())!).Should().BeGreaterThan(0, "the LISTEN connections of this schema are killed");
        }

        // Notify until the reopened listener hears one (a notification sent while it was down is lost by design).
        var deadline = System.Diagnostics.Stopwatch.StartNew();
        while (Volatile.Read(ref received) == 0)
        {
            // The defect is a listener that never comes back; the limit is only how long to wait for it.
            deadline.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(30), "the listener should reconnect after its 50 ms reconnect delay");
            await store.SetWorkerStateAsync("p", "w000", WorkerState.Available);
            await Task.Delay(50);
        }
    }
}
