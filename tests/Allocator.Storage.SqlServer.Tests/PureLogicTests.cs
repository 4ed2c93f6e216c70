using System.Diagnostics;
using System.Text.Json;
using Allocator.Storage.SqlServer.Internal;

namespace Allocator.Storage.SqlServer.Tests;

public sealed class SqlErrorClassifierTests
{
    [Theory]
    [InlineData(2627, nameof(SqlServerErrorKind.DuplicateKey))]
    [InlineData(2601, nameof(SqlServerErrorKind.DuplicateKey))]
    [InlineData(1205, nameof(SqlServerErrorKind.Deadlock))]
    [InlineData(1222, nameof(SqlServerErrorKind.LockTimeout))]
    [InlineData(-2, nameof(SqlServerErrorKind.ClientTimeout))]
    [InlineData(50404, nameof(SqlServerErrorKind.PoolNotFound))]
    [InlineData(50412, nameof(SqlServerErrorKind.StrategyChanged))]
    [InlineData(50408, nameof(SqlServerErrorKind.StatementTimeout))]
    [InlineData(10054, nameof(SqlServerErrorKind.ConnectionLost))]
    [InlineData(233, nameof(SqlServerErrorKind.ConnectionLost))]
    [InlineData(547, nameof(SqlServerErrorKind.PoolNotFound))] // a foreign key to pools: a pool a move removed (issue 23)
    [InlineData(515, nameof(SqlServerErrorKind.Other))]
    [InlineData(0, nameof(SqlServerErrorKind.Other))]
    public void Classify_ByNumber(int number, string expected) => SqlServerErrorClassifier.Classify(number).Should().Be(Enum.Parse<SqlServerErrorKind>(expected));

    [Fact]
    public void Classify_Numbers_TakesTheFirstKnownNumber()
    {
        SqlServerErrorClassifier.Classify([3621, 2627]).Should().Be(SqlServerErrorKind.DuplicateKey, "3621 'statement terminated' accompanies the real error");
        SqlServerErrorClassifier.Classify([1205, 3998]).Should().Be(SqlServerErrorKind.Deadlock);
        SqlServerErrorClassifier.Classify([]).Should().Be(SqlServerErrorKind.Other);
    }

    [Fact]
    public void Classify_UnknownNumberOfFatalSeverity_IsAConnectionLost_OutcomeUnknown()
    {
        // Managed SNI on Linux reports a broken socket as number 0, class 20 (seen here against a
        // port that refuses connections): by number alone it would be "Other", a raw error, a 500.
        SqlServerErrorClassifier.Classify([0, 0], severity: 20).Should().Be(SqlServerErrorKind.ConnectionLost);
        SqlServerErrorClassifier.Classify([0], severity: 16).Should().Be(SqlServerErrorKind.Other);
        SqlServerErrorClassifier.Classify([1205], severity: 20).Should().Be(SqlServerErrorKind.Deadlock, "a known number wins over the severity");
    }

    [Theory]
    [InlineData(0, nameof(SqlServerErrorKind.ConnectionRejected))]
    [InlineData(-2, nameof(SqlServerErrorKind.ConnectionRejected))]
    [InlineData(4060, nameof(SqlServerErrorKind.ConnectionRejected))]
    [InlineData(40613, nameof(SqlServerErrorKind.ConnectionRejected))]
    [InlineData(11001, nameof(SqlServerErrorKind.ConnectionRejected))]
    [InlineData(18456, nameof(SqlServerErrorKind.LoginFailed))]
    [InlineData(18488, nameof(SqlServerErrorKind.LoginFailed))]
    [InlineData(1346, nameof(SqlServerErrorKind.LoginFailed))]
    public void ClassifyOpen_EveryOpenFailureSentNothing_OnlyLoginRefusalsAreNotWorthAnotherTry(int number, string expected) =>
        SqlServerErrorClassifier.ClassifyOpen([number]).Should().Be(Enum.Parse<SqlServerErrorKind>(expected));

    [Fact]
    public void ClassifyOpen_PoolWaitTimeoutAndSpentBudget_AreRejectedConnections_OtherErrorsAreNot()
    {
        SqlServerRetryPolicy.ClassifyOpen(new InvalidOperationException("Timeout expired."), budgetExpired: false).Should().Be(SqlServerErrorKind.ConnectionRejected);
        SqlServerRetryPolicy.ClassifyOpen(new OperationCanceledException(), budgetExpired: true).Should().Be(SqlServerErrorKind.ConnectionRejected);
        SqlServerRetryPolicy.ClassifyOpen(new NotSupportedException("Globalization Invariant Mode is not supported."), budgetExpired: false).Should().Be(SqlServerErrorKind.Other);
    }

    [Fact]
    public void OpenRetryDelay_DoublesPerAttempt_FromTheOption()
    {
        var options = new SqlServerWorkerStoreOptions { OpenRetryDelay = TimeSpan.FromMilliseconds(100), RetryJitter = TimeSpan.Zero };
        var policy = new SqlServerRetryPolicy(_ => throw new InvalidOperationException(), new SqlServerCommandFactory(new SqlScripts("allocator", options.LockTimeout, SqlServerWorkerStore.StatementTimeout(options)), options.CommandTimeout), options, TimeProvider.System);
        Enumerable.Range(0, 4).Select(a => policy.OpenRetryDelay(a).TotalMilliseconds).Should().Equal(100, 200, 400, 800);
    }

    [Theory]
    [InlineData(nameof(SqlServerErrorKind.Deadlock), true)]
    [InlineData(nameof(SqlServerErrorKind.DuplicateKey), true)]
    [InlineData(nameof(SqlServerErrorKind.LockTimeout), false)]
    [InlineData(nameof(SqlServerErrorKind.ClientTimeout), false)]
    [InlineData(nameof(SqlServerErrorKind.Other), false)]
    public void IsRetryable_OnlyForRolledBackWholeTransactions(string kind, bool expected) =>
        SqlServerErrorClassifier.IsRetryable(Enum.Parse<SqlServerErrorKind>(kind)).Should().Be(expected);

    [Fact]
    public void Translate_MapsKindsToDomainErrors()
    {
        var options = new SqlServerWorkerStoreOptions();
        var inner = new InvalidOperationException("x");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.PoolNotFound, inner, "p1", options).Should()
            .BeOfType<AllocatorException>().Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.LockTimeout, inner, "p1", options).Should()
            .BeOfType<AllocatorException>().Which.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.ClientTimeout, inner, "p1", options).Message.Should().Contain("outcome is unknown").And.Contain("same session key");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.ClientTimeout, inner, "p1", options).Should().BeOfType<AllocatorException>().Which.OutcomeUnknown.Should().BeTrue("a client timeout may have committed (issue 12, #2)");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.ConnectionLost, inner, "p1", options).Should().BeOfType<AllocatorException>().Which.OutcomeUnknown.Should().BeTrue();
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.LockTimeout, inner, "p1", options).Should().BeOfType<AllocatorException>().Which.OutcomeUnknown.Should().BeFalse("XACT_ABORT rolled it back");
        SqlServerErrorClassifier.Classify(10054).Should().Be(SqlServerErrorKind.ConnectionLost);
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.StatementTimeout, inner, "p1", options).Should().BeOfType<AllocatorException>()
            .Which.Should().Match<AllocatorException>(e => e.Kind == AllocatorErrorKind.Unavailable && !e.OutcomeUnknown, "the script rolled back at its budget: nothing was written");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.ConnectionRejected, inner, "p1", options).Should().BeOfType<AllocatorException>()
            .Which.Should().Match<AllocatorException>(e => e.Kind == AllocatorErrorKind.Unavailable && !e.OutcomeUnknown, "nothing was sent");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.LoginFailed, inner, "p1", options).Message.Should().Contain("ConnectionStrings:Allocator");
        SqlServerRetryPolicy.Translate(SqlServerErrorKind.Other, inner, "p1", options).Should().BeSameAs(inner);
    }
}

public sealed class RegistrationBatchesTests
{
    [Fact]
    public void Split_CutsIntoBoundedChunks_InOrdinalWorkerIdOrder_KeepingIndexes()
    {
        var registrations = Enumerable.Range(0, 2_500).Reverse().Select(i => new WorkerRegistration($"w{i:D5}", "a", 1)).ToList();
        registrations.Add(new WorkerRegistration("W-upper", "a", 1));

        var chunks = RegistrationBatches.Split(registrations);

        chunks.Select(c => c.Count).Should().Equal(1_000, 1_000, 501);
        var flat = chunks.SelectMany(c => c).ToList();
        flat.Select(x => x.Registration.WorkerId).Should().BeInAscendingOrder(StringComparer.Ordinal);
        flat[0].Registration.WorkerId.Should().Be("W-upper", "ordinal order puts upper case first, as the BIN2 collation does");
        flat.Should().AllSatisfy(x => registrations[x.Index].Should().BeSameAs(x.Registration));
        flat.Select(x => x.Index).Should().OnlyHaveUniqueItems().And.HaveCount(registrations.Count);
    }

    [Fact]
    public void Split_StaysWellUnderTheLockEscalationThreshold()
    {
        // ~5,000 locks per statement trigger escalation; a registered row takes a few key locks
        // (clustered key, old and new eligible-index keys), fewer than 4.
        (RegistrationBatches.MaxRowsPerStatement * 4).Should().BeLessThan(5_000);
        RegistrationBatches.Split([.. Enumerable.Range(0, AllocatorLimits.MaxRegistrationBatch).Select(i => new WorkerRegistration($"w{i}", "a", 1))])
            .Should().AllSatisfy(c => c.Count.Should().BeLessThanOrEqualTo(RegistrationBatches.MaxRowsPerStatement));
    }

    [Fact]
    public void Split_SmallBatch_IsOneChunk() =>
        RegistrationBatches.Split([new WorkerRegistration("b", "a", 1), new WorkerRegistration("a", "a", 1)], maxRows: 10)
            .Should().ContainSingle().Which.Select(x => x.Index).Should().Equal(1, 0);

    [Fact]
    public void ReleaseJson_CarriesIndexIdAndEpoch_InRequestOrder_RepeatsIncluded()
    {
        var id = Guid.NewGuid();
        var json = SqlServerLeases.ReleaseJson([new LeaseRelease(id, 7), new LeaseRelease(Guid.Empty, long.MaxValue), new LeaseRelease(id, 7)]);
        using var document = JsonDocument.Parse(json);
        var rows = document.RootElement.EnumerateArray().ToList();
        rows.Select(r => r.GetProperty("i").GetInt32()).Should().Equal(0, 1, 2);
        rows[0].GetProperty("a").GetGuid().Should().Be(id);
        rows[2].GetProperty("a").GetGuid().Should().Be(id);
        rows[1].GetProperty("e").GetInt64().Should().Be(long.MaxValue);
    }

    [Fact]
    public void RegistrationJson_CarriesIndexesAndNormalizedTags()
    {
        var json = SqlServerWorkers.RegistrationJson([(7, new WorkerRegistration("w", "host:1", 3, ["b", "a", "b"]))]);
        using var document = JsonDocument.Parse(json);
        var row = document.RootElement[0];
        row.GetProperty("i").GetInt32().Should().Be(7);
        row.GetProperty("w").GetString().Should().Be("w");
        row.GetProperty("c").GetInt32().Should().Be(3);
        row.GetProperty("t").EnumerateArray().Select(t => t.GetString()).Should().Equal("a", "b");
    }
}

public sealed class MigrationOrderTests
{
    [Fact]
    public void PendingMigrations_SkipsApplied_InAscendingOrder()
    {
        var all = new[] { new SqlMigration(3, "0003_c", "x"), new SqlMigration(1, "0001_a", "x"), new SqlMigration(2, "0002_b", "x") };
        SqlServerMigrator.PendingMigrations(all, new HashSet<int> { 2 }).Select(m => m.Version).Should().Equal(1, 3);
        SqlServerMigrator.PendingMigrations(all, new HashSet<int> { 1, 2, 3 }).Should().BeEmpty();
    }

    [Fact]
    public void Verify_AppliedMigrationUnchanged_Passes_AndANewerBuildsVersionIsLeftAlone()
    {
        var baseline = new SqlMigration(1, "0001_baseline", "CREATE TABLE t (id int);");
        var act = () => SqlServerMigrator.Verify([baseline], new Dictionary<int, (string, string?)>
        {
            [1] = ("0001_baseline", baseline.Checksum.ToUpperInvariant() + "  "),
            [2] = ("0002_from_a_newer_build", "00"),
        });
        act.Should().NotThrow();
    }

    [Fact]
    public void Verify_AppliedMigrationEdited_FailsNamingIt()
    {
        var applied = new SqlMigration(1, "0001_baseline", "CREATE TABLE t (id int);");
        var edited = applied with { RawText = "CREATE TABLE t (id bigint);" };
        edited.Checksum.Should().NotBe(applied.Checksum);

        var act = () => SqlServerMigrator.Verify([edited], new Dictionary<int, (string, string?)> { [1] = ("0001_baseline", applied.Checksum) });

        act.Should().Throw<InvalidOperationException>().WithMessage("*0001_baseline*edited after it was applied*");
    }

    [Fact]
    public void Verify_PreReleaseMigrationLine_FailsNamingBoth()
    {
        var act = () => SqlServerMigrator.Verify([new SqlMigration(1, "0001_baseline", "x")], new Dictionary<int, (string, string?)> { [1] = ("0001_pools_and_workers", null) });

        act.Should().Throw<InvalidOperationException>().WithMessage("*0001_pools_and_workers*0001_baseline*");
    }

    [Fact]
    public void Checksum_IgnoresLineEndings()
    {
        new SqlMigration(1, "0001_a", "SELECT 1;\r\nSELECT 2;").Checksum.Should().Be(new SqlMigration(1, "0001_a", "SELECT 1;\nSELECT 2;").Checksum);
    }
}

public sealed class PoolChangeMonitorTests
{
    private static readonly TimeSpan Min = TimeSpan.FromMilliseconds(100);
    private static readonly TimeSpan Max = TimeSpan.FromSeconds(2);

    [Fact]
    public void NextDelay_DoublesWhileQuiet_UpToTheMax_AndResetsOnChange()
    {
        var delay = Min;
        var seen = new List<TimeSpan>();
        for (var i = 0; i < 7; i++)
        {
            delay = SqlServerChangeFeed.NextDelay(delay, changed: false, Min, Max);
            seen.Add(delay);
        }

        seen.Select(d => d.TotalMilliseconds).Should().Equal(200, 400, 800, 1600, 2000, 2000, 2000);
        SqlServerChangeFeed.NextDelay(Max, changed: true, Min, Max).Should().Be(Min);
    }
}

public sealed class OptionsAndFactoryTests
{
    [Fact]
    public void Defaults_AreValid_GivenAConnectionString()
    {
        var options = new SqlServerWorkerStoreOptions { ConnectionString = "Server=x" };
        options.Validate().Should().BeEmpty();
        options.Schema.Should().Be("allocator");
        options.LockTimeout.Should().BeLessThan(options.CommandTimeout);
    }

    [Fact]
    public void Validate_NamesEachProblem()
    {
        var options = new SqlServerWorkerStoreOptions
        {
            ConnectionString = "",
            Schema = "bad schema",
            LockTimeout = TimeSpan.FromSeconds(40),
            CommandTimeout = TimeSpan.FromSeconds(30),
            SkipRetries = -1,
            OpenRetries = 101,
        };
        var errors = options.Validate();
        errors.Should().Contain(e => e.Contains("ConnectionStrings:Allocator"));
        errors.Should().Contain(e => e.Contains("Schema"));
        errors.Should().Contain(e => e.Contains("LockTimeout must be below CommandTimeout"));
        errors.Should().Contain(e => e.Contains("SkipRetries"));
        errors.Should().Contain(e => e.Contains("OpenRetries"));
    }

    [Fact]
    public async Task CreateAsync_UnreachableServer_FailsFast_NamingTheSetting()
    {
        // Nothing listens on port 1: the connection is refused. No SQL Server is needed for this.
        var options = new SqlServerWorkerStoreOptions
        {
            ConnectionString = "Server=tcp:127.0.0.1,1;Database=allocator;User ID=sa;Password=not-logged;TrustServerCertificate=True",
            StartupConnectTimeout = TimeSpan.FromSeconds(2),
        };
        var watch = Stopwatch.StartNew();
        var act = () => SqlServerWorkerStore.CreateAsync(options);
        var error = await act.Should().ThrowAsync<InvalidOperationException>();
        error.Which.Message.Should().Contain("ConnectionStrings:Allocator").And.Contain("127.0.0.1").And.NotContain("not-logged");

        // It got as far as the network: SqlClient (7.1.0 too) refuses to open anything in
        // globalization-invariant mode, which this test host turns off (docs/sqlserver.md).
        error.Which.InnerException.Should().BeOfType<Microsoft.Data.SqlClient.SqlException>();
        watch.Elapsed.Should().BeLessThan(TimeSpan.FromSeconds(30));
    }

    [Fact]
    public async Task CreateAsync_MalformedConnectionString_NamesTheSetting()
    {
        var act = () => SqlServerWorkerStore.CreateAsync(new SqlServerWorkerStoreOptions { ConnectionString = "this is not a connection string" });
        (await act.Should().ThrowAsync<ArgumentException>()).Which.Message.Should().Contain("ConnectionStrings:Allocator");
    }
}
