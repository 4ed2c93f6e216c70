using System.Text.RegularExpressions;
using Allocator.Storage.SqlServer.Internal;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>What can be checked of the T-SQL without a server, beyond parsing (ParsedSqlTests).</summary>
public sealed partial class EmbeddedSqlTests
{
    private static readonly string[] Operations =
    [
        "allocate_skip_locked", "allocate_blocking", "deregister_worker", "get_allocation", "get_allocation_by_key", "get_pool", "get_pool_changes",
        "get_pool_statistics", "get_worker", "get_workers", "reap_expired", "register_workers", "release",
        "release_batch", "renew", "report_load", "set_worker_state", "upsert_pool",
        "directory_get", "directory_replace", "directory_count", "remove_pool", "claim_pool_activation",
    ];

    private static readonly string[] MigrationSteps = ["migrate_lock", "migrate_versions", "migrate_record"];

    public static TheoryData<string> OperationNames => [.. Operations];

    public static TheoryData<string> AllScriptNames => [.. Operations.Concat(MigrationSteps)];

    [Fact]
    public void Operations_SharedWithThePostgreSqlStore_HaveTheSameFileNames()
    {
        // One set of names across stores: every operation both stores have is one file name.
        var postgres = Directory.GetFiles(Path.Combine(Allocator.Testing.Repository.Root, "src", "Allocator.Storage.PostgreSql", "Sql"), "*.sql")
            .Select(Path.GetFileNameWithoutExtension).ToHashSet();
        // Store-specific on purpose: SQL Server polls change counters (no LISTEN/NOTIFY); PostgreSQL
        // has an EXPLAIN-only pick, an advisory-lock step for serialized registrations, and a
        // session-lock migrator (unlock, prepare and function records).
        string[] sqlServerOnly = ["get_pool_changes"];
        // purge_history: SQL Server purges in reap_expired (ended rows stay in its allocations table);
        // get_pool_ids: the LISTEN catch-up (SQL Server's poll sees every change anyway).
        // remove_pool_lock: PostgreSQL removes a pool in two statements of one batch (ON DELETE CASCADE needs
        // the lock taken before the snapshot that counts); SQL Server's one script has no cascade to fear.
        // notify_capacity_changed: the NOTIFY a registration batch sends (SQL Server's change feed polls).
        // release_abandoned: PostgreSQL's fenced release is a function over release_batch's; SQL Server's
        // release_batch.sql takes the fence as a parameter (issue 47).
        // replication: how the server replicates its commits (issue 48); the SQL Server store does not report it yet.
        string[] postgresOnly = ["replication", "pick_candidate", "serialize_registrations", "migrate_unlock", "migrate_prepare", "migrate_record_function", "purge_history", "get_pool_ids", "remove_pool_lock", "notify_capacity_changed", "release_abandoned",
            "allocate_skip_locked_fenced", "allocate_blocking_fenced"]; // SQL Server's allocation scripts take the fence as a parameter (NULL: none)
        Operations.Concat(MigrationSteps).Except(sqlServerOnly).Should().BeSubsetOf(postgres);
        postgres.Except(postgresOnly).Should().BeEquivalentTo(Operations.Concat(MigrationSteps).Except(sqlServerOnly));
        Directory.GetFiles(Path.Combine(Allocator.Testing.Repository.Root, "src", "Allocator.Storage.PostgreSql", "Migrations"), "*.sql").Select(Path.GetFileName).Order(StringComparer.Ordinal)
            .Should().Equal(SqlScripts.Migrations.Select(m => m.Name + ".sql"), "both stores number and name their migrations alike");
    }

    [Fact]
    public void Issue12Fixes_AreInTheScripts()
    {
        string Code(string name) => SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);

        // #4: the epoch outlives a deregistered worker, and a new row continues from it.
        Code("deregister_worker").Should().Contain("worker_epochs");
        Code("register_workers").Should().MatchRegex(@"ISNULL\(\(SELECT r\.epoch FROM \{schema\}\.worker_epochs");
        // #5: renew refuses an expired lease; allocations answer an expired key as ended; the
        // reaper can reap one pool; replays of ended keys within the retention.
        Code("renew").Should().Contain("expires_at > @now");
        foreach (var name in new[] { "allocate_skip_locked", "allocate_blocking" })
        {
            Code(name).Should().Contain("CASE WHEN a.expires_at <= @now THEN a.expires_at END", name);
            Code(name).Should().Contain("a.ended_at > @history_after", name);
        }

        Code("reap_expired").Should().Contain("@pool_id IS NULL OR a.pool_id = @pool_id").And.Contain("DELETE FROM old");
        SqlScripts.Migrations.Select(m => m.Name).Should().Contain("0004_worker_epochs");
    }

    [Fact]
    public void EmbeddedScripts_AreExactlyTheExpectedFiles_AndNotEmpty()
    {
        SqlScripts.RawOperations.Keys.Should().BeEquivalentTo(Operations.Concat(MigrationSteps));
        SqlScripts.RawOperations.Values.Should().AllSatisfy(text => text.Trim().Should().NotBeEmpty());
        SqlScripts.Migrations.Should().NotBeEmpty();
        SqlScripts.Migrations.Should().AllSatisfy(m => m.RawText.Trim().Should().NotBeEmpty());
    }

    [Fact]
    public void Migrations_AreNumberedFromOne_AscendingAndContiguous()
    {
        SqlScripts.Migrations.Select(m => m.Version).Should().Equal(Enumerable.Range(1, SqlScripts.Migrations.Count));
    }

    [Fact]
    public void Migrations_GuardEveryCreate_SoThatARerunChangesNothing()
    {
        foreach (var migration in SqlScripts.Migrations)
        {
            var code = SqlText.StripCommentsAndStrings(migration.RawText);
            var creates = CreateStatement().Matches(code); // none in a migration that only checks (0005, 0006)
            foreach (Match create in creates)
            {
                var before = code[..create.Index];
                var guard = before.LastIndexOf("IF ", StringComparison.Ordinal);
                guard.Should().BeGreaterThanOrEqualTo(0, $"{migration.Name}: {create.Value} needs a guard");
                before[guard..].Should().MatchRegex(GuardThenBegin().ToString(), $"{migration.Name}: {create.Value} must sit in IF NOT EXISTS/OBJECT_ID(...) IS NULL ... BEGIN");
            }
        }
    }

    [Fact]
    public void Migrations_UseNoParametersAndOnlyTheSchemaToken()
    {
        foreach (var migration in SqlScripts.Migrations)
        {
            SqlText.FreeVariables(migration.RawText).Should().BeEmpty(migration.Name);
            Tokens(migration.RawText).Should().BeSubsetOf([SqlScripts.SchemaToken], migration.Name);
        }
    }

    [Theory]
    [MemberData(nameof(AllScriptNames))]
    public void EveryScript_SetsXactAbortAndReadCommitted_BeforeAnyWork(string name)
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
        var xactAbort = code.IndexOf("SET XACT_ABORT ON;", StringComparison.Ordinal);
        var isolation = code.IndexOf("SET TRANSACTION ISOLATION LEVEL READ COMMITTED;", StringComparison.Ordinal);
        xactAbort.Should().BeGreaterThanOrEqualTo(0);
        isolation.Should().BeGreaterThanOrEqualTo(0);
        var firstWork = Regex.Match(code, @"\b(SELECT|UPDATE|INSERT|DELETE|BEGIN TRANSACTION|EXEC|IF)\b");
        firstWork.Index.Should().BeGreaterThan(Math.Max(xactAbort, isolation), "the settings come first");
    }

    [Theory]
    [MemberData(nameof(OperationNames))]
    public void EveryOperation_SetsTheLockTimeout_FromOptions(string name) =>
        SqlScripts.RawOperations[name].Should().Contain("SET LOCK_TIMEOUT " + SqlScripts.LockTimeoutToken + ";");

    [Theory]
    [MemberData(nameof(AllScriptNames))]
    public void EveryScript_UsesOnlyTheThreeTokens_NoFormattingPlaceholders(string name)
    {
        Tokens(SqlScripts.RawOperations[name]).Should().BeSubsetOf([SqlScripts.SchemaToken, SqlScripts.LockTimeoutToken, SqlScripts.StatementTimeoutToken]);
    }

    [Theory]
    [MemberData(nameof(OperationNames))]
    public void EveryTransaction_SetsItsTimeBudgetFirst_AndRollsBackPastIt_RightBeforeCommitting(string name)
    {
        // SQL Server has no statement_timeout: each script bounds itself inside the command
        // timeout and, past its budget, throws 50408 instead of committing (XACT_ABORT rolls back).
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
        var begin = code.IndexOf("BEGIN TRANSACTION;", StringComparison.Ordinal);
        if (begin < 0)
        {
            code.Should().NotMatchRegex(@"\bCOMMIT\b", "{0} writes nothing in a transaction", name);
            return;
        }

        var deadline = code.IndexOf("DECLARE @deadline datetime2(7) = DATEADD(millisecond, " + SqlScripts.StatementTimeoutToken + ", SYSUTCDATETIME());", StringComparison.Ordinal);
        deadline.Should().BeInRange(0, begin, "{0} starts its clock before its transaction", name);
        Regex.Matches(code, @"\bCOMMIT TRANSACTION;").Should().ContainSingle(name);
        code.Should().MatchRegex(
            @"IF SYSUTCDATETIME\(\) > @deadline\s+THROW " + SqlServerErrorClassifier.StatementTimeoutNumber + @", N?'', 1;\s+COMMIT TRANSACTION;",
            "{0} checks its budget as the last thing before it commits", name);
    }

    [Fact]
    public void SkipLockedBatch_StopsAtItsBudget_BetweenRequests()
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["allocate_skip_locked"]);
        code.Should().MatchRegex(@"WHILE 1 = 1\s+BEGIN\s+IF SYSUTCDATETIME\(\) > @deadline\s+THROW 50408");
    }

    [Theory]
    [MemberData(nameof(AllScriptNames))]
    public void EveryScript_BuildsNoDynamicSql_FromValues(string name)
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
        code.Should().NotContainEquivalentOf("sp_executesql");
        if (name == "migrate_lock")
        {
            // The one dynamic statement: CREATE SCHEMA must be alone in its batch; the name is QUOTENAME'd.
            Regex.Matches(code, @"\bEXEC\s*\(").Should().ContainSingle();
            code.Should().Contain("QUOTENAME(@schema_name)");
        }
        else
        {
            code.Should().NotMatchRegex(@"\bEXEC(UTE)?\s*\(");
        }
    }

    [Fact]
    public void SkipLockedSelections_LockTheRowTheyPick_WithUpdlockReadpastRowlock()
    {
        foreach (var (name, table) in new[] { ("allocate_skip_locked", "workers"), ("reap_expired", "allocations") })
        {
            var hints = SelectionHints(name, table);
            hints.Should().Contain(["UPDLOCK", "READPAST", "ROWLOCK", "READCOMMITTEDLOCK"], name);
        }
    }

    [Fact]
    public void BlockingSelection_WaitsForTheLock_WithoutReadpast()
    {
        var hints = SelectionHints("allocate_blocking", "workers");
        hints.Should().Contain(["UPDLOCK", "ROWLOCK", "READCOMMITTEDLOCK"]);
        hints.Should().NotContain("READPAST");
    }

    [Fact]
    public void BlockingAllocation_TakesOneRequest_AndLocksOneWorkerRow()
    {
        // #6: one request per statement, so a statement that waits for a worker row holds no other.
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["allocate_blocking"]);
        SqlText.FreeVariables(SqlScripts.RawOperations["allocate_blocking"]).Should().BeEquivalentTo(
            ["pool_id", "allocation_id", "session_key", "units", "tags", "lease_ms", "fallback_lease_ms", "fallback", "retention_ms", "fence"]);
        code.Should().NotContain("WHILE").And.NotContain("OPENJSON(@requests)");
        // One locking read of workers per placement, in the two arms of one IF: one of them runs.
        Regex.Matches(code, @"\{schema\}\.workers AS w WITH \(UPDLOCK").Should().HaveCount(2, "one locking read of workers per placement");
        Regex.Matches(code, @"UPDATE candidate").Should().HaveCount(2);
        code.Should().MatchRegex(@"IF @placement = 1\s+BEGIN\s+WITH candidate AS[^;]+;\s+END\s+ELSE\s+BEGIN\s+WITH candidate AS[^;]+;\s+END;", "the two reads are the arms of one IF");
        Regex.Matches(code, @"WHERE @existing IS NULL\s+AND w\.pool_id = @pool_id").Should().HaveCount(2, "a key that already answered picks no row, in either placement");
    }

    [Fact]
    public void BlockingAllocation_ChecksTheKeyAgainAfterItsLockWait()
    {
        // Issue 20, #4: checked only before the wait, a key allocated and released meanwhile was
        // allocated a second time (the unique index covers active keys only). PostgreSQL and the
        // in-memory store pass the conformance test of this; SQL Server runs it only with an engine.
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["allocate_blocking"]);
        var wait = code.IndexOf("UPDATE candidate", StringComparison.Ordinal);
        var insert = code.IndexOf("INSERT INTO {schema}.allocations", StringComparison.Ordinal);

        wait.Should().BeGreaterThan(0);
        var lookups = Regex.Matches(code, @"a\.session_key = @session_key").Select(m => m.Index).ToList();
        lookups.Should().Contain(i => i < wait, "the key is checked before the wait (a replay picks no row)");
        lookups.Should().Contain(i => i > wait && i < insert, "and again after the wait, before the insert");
    }

    [Fact]
    public void Deregistration_LocksTheWorkersAllocationsBeforeTheWorker()
    {
        // Issue 20, #6: release, release_batch and the reaper lock an allocation, then its worker;
        // deregistration locked the worker, then its allocations: a cycle.
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["deregister_worker"]);
        var allocationLock = Regex.Match(code, @"FROM \{schema\}\.allocations AS a WITH \(UPDLOCK");
        var workerLock = code.IndexOf("UPDATE {schema}.workers", StringComparison.Ordinal);

        allocationLock.Success.Should().BeTrue("the worker's allocations are locked first");
        workerLock.Should().BeGreaterThan(allocationLock.Index, "and the worker row after them");
        code[allocationLock.Index..workerLock].Should().Contain("ORDER BY a.allocation_id", "one seek at a time, in allocation_id order");
    }

    [Fact]
    public void Reaper_FreesWorkersOneAtATime_InWorkerOrder()
    {
        // Issue 20, #6: an UPDATE ... FROM join over the freed workers locks in plan order.
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["reap_expired"]);

        Regex.IsMatch(code, @"UPDATE w\s+SET load_slots").Should().BeFalse("no set-based join update of workers");
        code.Should().Contain("ORDER BY f.pool_id, f.worker_id");
        Regex.IsMatch(code, @"UPDATE \{schema\}\.workers\s+SET load_slots = load_slots - @units\s+WHERE pool_id = @pool AND worker_id = @worker").Should().BeTrue();
    }

    [Theory]
    [MemberData(nameof(AllScriptNames))]
    public void EveryUpdlockOnATable_IsARowLock(string name)
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
        foreach (Match hint in TableHints().Matches(code))
        {
            var list = hint.Groups["hints"].Value;
            if (list.Contains("UPDLOCK", StringComparison.Ordinal))
            {
                list.Should().Contain("ROWLOCK", $"{name}: {hint.Value}");
            }

            if (list.Contains("READPAST", StringComparison.Ordinal))
            {
                list.Should().Contain("UPDLOCK", $"{name}: {hint.Value}").And.Contain("READCOMMITTEDLOCK", $"{name}: {hint.Value}");
            }
        }
    }

    [Fact]
    public void ReleaseBatch_LocksAllocationsThenWorkers_EachInIdOrder_InOneTransaction()
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["release_batch"]);
        code.Should().Contain("OPENJSON(@releases)");
        SelectionHints("release_batch", "allocations").Should().Contain(["UPDLOCK", "ROWLOCK", "READCOMMITTEDLOCK"]).And.NotContain("READPAST");

        // Allocation rows one at a time in allocation id order, worker rows one at a time in worker id order, after them.
        var begin = code.IndexOf("BEGIN TRANSACTION;", StringComparison.Ordinal);
        var allocations = code.IndexOf("ORDER BY b.allocation_id", StringComparison.Ordinal);
        var workers = code.IndexOf("ORDER BY f.worker_id", StringComparison.Ordinal);
        var workerUpdate = code.IndexOf("SET load_slots = load_slots - @units", StringComparison.Ordinal);
        var commit = code.IndexOf("COMMIT TRANSACTION;", StringComparison.Ordinal);
        new[] { begin, allocations, workers, workerUpdate, commit }.Should().BeInAscendingOrder().And.NotContain(-1);
        Regex.Matches(code, @"UPDATE \{schema\}\.pool_changes").Should().ContainSingle("one change per batch, not per release");
    }

    [Fact]
    public void AllocateScripts_UpdateThroughTheCte_WithOutput_AndInsertInTheSameTransaction()
    {
        foreach (var name in new[] { "allocate_skip_locked", "allocate_blocking" })
        {
            var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
            code.Should().MatchRegex(@"WITH candidate AS\s*\(\s*SELECT TOP \(1\)", name);
            code.Should().MatchRegex(@"UPDATE candidate\s+SET load_slots = load_slots \+ @units\s+OUTPUT inserted\.worker_id", name);
            code.Should().MatchRegex(@"ORDER BY w\.score, w\.worker_id", name);
            var begin = code.IndexOf("BEGIN TRANSACTION;", StringComparison.Ordinal);
            var insert = code.IndexOf(".allocations (allocation_id", StringComparison.Ordinal);
            var commit = code.IndexOf("COMMIT TRANSACTION;", StringComparison.Ordinal);
            begin.Should().BeLessThan(insert, name);
            insert.Should().BeLessThan(commit, name);
        }
    }

    [Fact]
    public void AllocateScripts_Pack_ReadsTheSameCandidatesInReverseOrder()
    {
        // Issue 49: 'pack' differs from 'spread' in the order of the read alone (eligibility, hints
        // and the update are the same), so the pick is the most-loaded row that fits and nobody holds.
        foreach (var name in new[] { "allocate_skip_locked", "allocate_blocking" })
        {
            var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
            code.Should().Contain("@placement = p.placement", name);
            var reads = Regex.Matches(code, @"WITH candidate AS\s*\((?<read>[^;]+?)ORDER BY (?<order>[^)]+)\)").ToList();
            reads.Should().HaveCount(2, name);
            reads[0].Groups["order"].Value.Trim().Should().Be("w.score DESC, w.worker_id DESC", $"{name}: the IF @placement = 1 arm comes first");
            reads[1].Groups["order"].Value.Trim().Should().Be("w.score, w.worker_id", name);
            reads[0].Groups["read"].Value.Should().Be(reads[1].Groups["read"].Value, $"{name}: the same columns, hints and conditions in both placements");
        }

        foreach (var name in new[] { "get_pool", "get_pool_statistics" })
        {
            SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]).Should().Contain("p.placement", name);
        }

        SqlText.StripCommentsAndStrings(SqlScripts.RawOperations["upsert_pool"]).Should().Contain("placement = @placement").And.Contain("serialize_registrations, placement)");
    }

    [Fact]
    public void ScoreColumn_UsesTheSameScaleAsWorkerScore_InBigintArithmetic()
    {
        var migration = SqlScripts.Migrations.Single(m => m.Name == "0001_baseline").RawText;
        migration.Should().Contain($"CAST(load_slots AS bigint) * CAST({WorkerScore.Full} AS bigint) / capacity");
        migration.Should().Contain($"CAST(ISNULL(reported_load_index, 0) AS bigint) * CAST({WorkerScore.PerLoadIndexPoint} AS bigint)");
        migration.Should().MatchRegex(@"score AS CAST\(\s*CASE[\s\S]*END AS bigint\) PERSISTED NOT NULL");
        migration.Should().Contain("COLLATE Latin1_General_100_BIN2", "ties break by worker id in ordinal order");
        migration.Should().MatchRegex(@"CREATE NONCLUSTERED INDEX ix_workers_eligible\s+ON \{schema\}\.workers \(pool_id, score, worker_id\)[\s\S]*?WHERE state = 0;");
    }

    [Fact]
    public void Rendering_ReplacesTokens_WithTheQuotedSchemaAndTheLockTimeout()
    {
        var scripts = new SqlScripts("alloc_1", TimeSpan.FromMilliseconds(1500), TimeSpan.FromMilliseconds(2500));
        foreach (var script in scripts.All)
        {
            SqlText.StripCommentsAndStrings(script.Text).Should().NotContain("{").And.NotContain("}", script.Name);
        }

        scripts["allocate_skip_locked"].Text.Should().Contain("FROM [alloc_1].workers AS w").And.Contain("SET LOCK_TIMEOUT 1500;")
            .And.Contain("DATEADD(millisecond, 2500, SYSUTCDATETIME())");
    }

    [Theory]
    [InlineData("")]
    [InlineData("1abc")]
    [InlineData("a]b")]
    [InlineData("x;DROP TABLE y")]
    [InlineData("a b")]
    [InlineData("ab'c")]
    public void Schema_RejectsAnythingButASimpleIdentifier(string schema)
    {
        SqlIdentifier.Check(schema).Should().NotBeNull();
        var act = () => new SqlScripts(schema, TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(2));
        act.Should().Throw<ArgumentException>();
    }

    [Fact]
    public void Schema_TooLong_IsRejected() => SqlIdentifier.Check(new string('a', SqlIdentifier.MaxLength + 1)).Should().NotBeNull();

    [Fact]
    public void FreeVariables_IgnoreDeclaredSystemCommentedAndQuotedNames()
    {
        const string text = """
            -- @in_comment
            /* @in_block */
            DECLARE @local int = 1;
            SELECT @local, @@ROWCOUNT, N'@in_string', '@also', @param FROM t WHERE x = @Other;
            """;
        SqlText.FreeVariables(text).Should().BeEquivalentTo(["param", "Other"]);
    }

    private static IReadOnlyList<string> SelectionHints(string name, string table)
    {
        var code = SqlText.StripCommentsAndStrings(SqlScripts.RawOperations[name]);
        var top = code.IndexOf("SELECT TOP (", StringComparison.Ordinal);
        top.Should().BeGreaterThanOrEqualTo(0, name);
        var reference = Regex.Match(code[top..], @"FROM \{schema\}\." + table + @" AS \w+ WITH \((?<hints>[^)]*)\)");
        reference.Success.Should().BeTrue($"{name}: the selection reads {table} with table hints");
        return [.. reference.Groups["hints"].Value.Split(',', StringSplitOptions.TrimEntries)];
    }

    private static HashSet<string> Tokens(string text) => [.. Regex.Matches(text, @"\{[^}\s]*\}").Select(m => m.Value)];

    [GeneratedRegex(@"\bCREATE\s+(UNIQUE\s+)?(CLUSTERED\s+|NONCLUSTERED\s+)?(TABLE|INDEX|SEQUENCE)\b[^\n]*")]
    private static partial Regex CreateStatement();

    [GeneratedRegex(@"^IF\s+(NOT\s+EXISTS\s*\(|OBJECT_ID\([^)]*\)\s+IS\s+NULL)[^;]*?\bBEGIN\s*$")]
    private static partial Regex GuardThenBegin();

    [GeneratedRegex(@"\{schema\}\.\w+ AS \w+ WITH \((?<hints>[^)]*)\)")]
    private static partial Regex TableHints();
}
