using System.Diagnostics;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class MigrationTests : IAsyncLifetime
{
    private readonly string _schema = PostgresTestDatabase.NewSchema();

    public Task InitializeAsync() => Task.CompletedTask;

    public Task DisposeAsync() => PostgresTestDatabase.DropSchemaAsync(_schema);

    [Fact]
    public async Task Migrate_RunConcurrently_AppliesEachMigrationAndFunctionOnce()
    {
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var runs = Enumerable.Range(0, 8).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            return await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, CancellationToken.None);
        })).ToList();
        start.SetResult();
        var results = await Task.WhenAll(runs).WaitAsync(TimeSpan.FromSeconds(60));

        var embedded = MigrationSet.Embedded;
        results.SelectMany(r => r.Migrations).Should().BeEquivalentTo(embedded.Migrations.Select(m => m.Name), "the migrators queue on the advisory lock and only the first applies anything");
        results.SelectMany(r => r.Functions).Should().BeEquivalentTo(embedded.Functions.Select(f => f.Name));
        var again = await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, CancellationToken.None);
        again.Migrations.Should().BeEmpty();
        again.Functions.Should().BeEmpty("no function file changed");
        (await ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".schema_migrations WHERE checksum IS NOT NULL")).Should().Be(embedded.Migrations.Count);
        (await ScalarAsync<bool>("SELECT pg_try_advisory_lock(hashtext('allocator.migrate'), hashtext($1)) AND pg_advisory_unlock(hashtext('allocator.migrate'), hashtext($1))", _schema))
            .Should().BeTrue("the migrator's session lock is released");
    }

    [Fact]
    public async Task Schema_EveryKeyColumn_ComparesByteWise()
    {
        // Issue 20, #7: session_key took the database's default collation while ids used "C". An
        // OS collation change (a glibc upgrade) without REINDEX can then corrupt the unique index
        // that enforces idempotency; "C" compares bytes and never changes.
        await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, CancellationToken.None);

        await using var command = PostgresTestDatabase.DataSource.CreateCommand(
            """
            SELECT c.relname || '.' || a.attname || ' ' || coalesce(k.collname, '?')
              FROM pg_attribute a
              JOIN pg_class c ON c.oid = a.attrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
              LEFT JOIN pg_collation k ON k.oid = a.attcollation
             WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attname IN ('pool_id', 'worker_id', 'session_key')
             ORDER BY 1
            """);
        command.Parameters.Add(new NpgsqlParameter { Value = _schema });
        var columns = new List<string>();
        await using (var reader = await command.ExecuteReaderAsync())
        {
            while (await reader.ReadAsync())
            {
                columns.Add(reader.GetString(0));
            }
        }

        columns.Should().Contain("allocations.session_key C", "the unique index that enforces one allocation per key");
        columns.Where(c => c != "allocation_history.session_key default").Should().OnlyContain(c => c.EndsWith(" C", StringComparison.Ordinal), "every id and key column compares byte-wise");

        // The history keeps its column's collation (an ALTER would rewrite its index under a lock
        // that holds off releases); its key lookups go through a byte-wise index instead.
        (await ScalarAsync<string>(
            """
            SELECT k.collname FROM pg_index i
              JOIN pg_class c ON c.oid = i.indexrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_collation k ON k.oid = i.indcollation[1]
             WHERE n.nspname = $1 AND c.relname = 'allocation_history_session_c'
            """, _schema)).Should().Be("C");

        // One index per purpose: the default-collation session index served only the build before
        // issue 20, and 0010 dropped it (an insert on every release; 5.4 GB at 50 million rows).
        (await IndexesAsync("allocation_history")).Should().Be("allocation_history_ended_at,allocation_history_pkey,allocation_history_session_c");

        // Only allocations_session names the pool (0011): an index by worker that also held pool_id
        // served a pool's condition by a read of the whole index (issue 24).
        (await IndexesAsync("allocations", column: "pool_id")).Should().Be("allocations_session");

        // The history is analyzed from a sample of 3,000 rows (0012): ANALYZE samples 300 rows per
        // unit of the largest target of any column, so one column left at the default would undo it.
        (await ColumnsNotSampledForTenAsync("allocation_history")).Should().BeEmpty("every column of the history samples for a target of 10");

        // So are the active allocations (0013): they grow with the sessions a pool holds, and were
        // analyzed 25 times in a 30-second storm at 125 ms each.
        (await ColumnsNotSampledForTenAsync("allocations")).Should().BeEmpty("every column of the active allocations samples for a target of 10");
    }

    [Fact]
    public async Task Migrate_AppliedMigrationEdited_FailsNamingIt()
    {
        var v1 = new MigrationSet([Migration.Parse("0001_base", "CREATE TABLE {schema}.t (id integer PRIMARY KEY);")], []);
        await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, v1, CancellationToken.None);

        var edited = new MigrationSet([Migration.Parse("0001_base", "CREATE TABLE {schema}.t (id bigint PRIMARY KEY);")], []);
        var act = () => PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, edited, CancellationToken.None);

        (await act.Should().ThrowAsync<InvalidOperationException>()).Which.Message.Should().Contain("0001_base").And.Contain("edited after it was applied");
        var renamed = new MigrationSet([Migration.Parse("0001_initial", v1.Migrations[0].Text)], []);
        var otherLine = () => PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, renamed, CancellationToken.None);
        (await otherLine.Should().ThrowAsync<InvalidOperationException>()).Which.Message.Should().Contain("0001_initial").And.Contain("0001_base");
    }

    [Fact]
    public async Task Migrate_FunctionFileChanged_IsAppliedAgain_AndOnlyThen()
    {
        const string Base = "CREATE TABLE {schema}.t (id integer PRIMARY KEY);";
        static FunctionScript Answer(int value) => new("answer", $"CREATE OR REPLACE FUNCTION {{schema}}.answer() RETURNS integer LANGUAGE sql AS $$ SELECT {value} $$;");
        var set = new MigrationSet([Migration.Parse("0001_base", Base)], [Answer(1)]);
        (await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, set, CancellationToken.None)).Functions.Should().Equal("answer");
        (await ScalarAsync<int>($"SELECT \"{_schema}\".answer()")).Should().Be(1);

        (await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, set, CancellationToken.None)).Functions.Should().BeEmpty("the file did not change");

        var changed = set with { Functions = [Answer(2)] };
        (await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, changed, CancellationToken.None)).Functions.Should().Equal("answer");
        (await ScalarAsync<int>($"SELECT \"{_schema}\".answer()")).Should().Be(2, "the changed function text was applied");
    }

    [Fact]
    public async Task Migrate_NoTransactionMigration_BuildsIndexConcurrently_WithoutBlockingWrites()
    {
        var baseline = Migration.Parse("0001_base", "CREATE TABLE {schema}.t (id integer PRIMARY KEY, v integer NOT NULL);");
        await PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, new MigrationSet([baseline], []), CancellationToken.None);
        var index = Migration.Parse("0002_t_v", $"""
            {Migration.NoTransactionMarker}
            -- Re-runnable: a failed concurrent build leaves an invalid index behind.
            DROP INDEX CONCURRENTLY IF EXISTS {"{schema}"}.t_v;
            CREATE INDEX CONCURRENTLY t_v ON {"{schema}"}.t (v);
            """);
        index.NoTransaction.Should().BeTrue();
        index.Statements().Should().HaveCount(2);

        // A writer's transaction is open: CREATE INDEX CONCURRENTLY waits for it to end, but
        // lets other writers in meanwhile (a plain CREATE INDEX would queue every later writer
        // behind its SHARE lock).
        await using var writer = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        await using var open = await writer.BeginTransactionAsync();
        await using (var insert = new NpgsqlCommand($"INSERT INTO \"{_schema}\".t VALUES (1, 1)", writer, open))
        {
            await insert.ExecuteNonQueryAsync();
        }

        var migrate = PostgresMigrator.MigrateAsync(PostgresTestDatabase.DataSource, _schema, new MigrationSet([baseline, index], []), CancellationToken.None);
        await WaitUntilAsync(async () => await ScalarAsync<long>(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'") > 0,
            "the concurrent index build to wait for the open writer");

        await using (var other = await PostgresTestDatabase.DataSource.OpenConnectionAsync())
        await using (var tx = await other.BeginTransactionAsync())
        {
            await using var insert = new NpgsqlCommand($"SET LOCAL lock_timeout = '2s'; INSERT INTO \"{_schema}\".t VALUES (2, 2)", other, tx);
            await insert.ExecuteNonQueryAsync(); // lock_timeout (55P03) if the build blocked writes
            await tx.CommitAsync();
        }

        migrate.IsCompleted.Should().BeFalse("the build still waits for the first writer");
        await open.CommitAsync();
        (await migrate.WaitAsync(TimeSpan.FromSeconds(30))).Migrations.Should().Equal("0002_t_v");
        (await ScalarAsync<bool>($"SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = '\"{_schema}\".t_v'::regclass")).Should().BeTrue();
        (await ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".t")).Should().Be(2);
    }

    [Theory]
    [InlineData("bad-name")]
    [InlineData("x\"; DROP TABLE y; --")]
    [InlineData("")]
    [InlineData("1abc")]
    public async Task Schema_NotAnIdentifier_IsRejected(string schema)
    {
        var act = () => PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions { DataSource = PostgresTestDatabase.DataSource, Schema = schema });
        await act.Should().ThrowAsync<ArgumentException>();
    }

    [Fact]
    public async Task MissingConnectionString_FailsClearly()
    {
        var act = () => PostgresWorkerStore.CreateAsync(new PostgresWorkerStoreOptions());
        await act.Should().ThrowAsync<ArgumentException>().WithMessage("*ConnectionString*");
    }

    /// <summary>The names of <paramref name="table"/>'s indexes in this schema, sorted and comma separated; with <paramref name="column"/>, only those that hold it.</summary>
    private Task<string> IndexesAsync(string table, string column = "") => ScalarAsync<string>(
        """
        SELECT coalesce(string_agg(c.relname, ',' ORDER BY c.relname), '') FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          JOIN pg_class t ON t.oid = i.indrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE n.nspname = $1 AND t.relname = $2
           AND ($3 = '' OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attname = $3 AND a.attnum = ANY (i.indkey)))
        """, _schema, table, column);

    /// <summary><paramref name="table"/>'s columns in this schema whose statistics target is not 10, as name=target, comma separated.</summary>
    private Task<string> ColumnsNotSampledForTenAsync(string table) => ScalarAsync<string>(
        """
        SELECT coalesce(string_agg(a.attname || '=' || coalesce(nullif(a.attstattarget, -1)::text, 'default'), ',' ORDER BY a.attnum), '')
          FROM pg_attribute a
         WHERE a.attrelid = format('%I.%I', $1::text, $2::text)::regclass AND a.attnum > 0 AND NOT a.attisdropped
           AND a.attstattarget IS DISTINCT FROM 10
        """, _schema, table);

    private static async Task<T> ScalarAsync<T>(string sql, params object[] args)
    {
        await using var command = PostgresTestDatabase.DataSource.CreateCommand(sql);
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        return (T)(await command.ExecuteScalarAsync())!;
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
