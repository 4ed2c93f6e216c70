using Allocator.LoadTests.Integration;
using Allocator.LoadTests.Scenarios;
using Allocator.LoadTests.Smoke;
using Npgsql;

namespace Allocator.LoadTests.Tests.Scenarios;

/// <summary>
/// A run's schema on a real PostgreSQL: dropped once the run's audit has passed (runs against a
/// lasting database used to leave every schema behind), kept and named otherwise.
/// </summary>
public sealed class PostgresStoreProviderTests
{
    private static string ConnectionString
    {
        get
        {
            var connectionString = Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES");
            connectionString.Should().NotBeNullOrEmpty("ALLOCATOR_POSTGRES must hold a PostgreSQL connection string (eng/test.sh starts one)");
            return connectionString!;
        }
    }

    [Fact]
    public async Task Run_WhoseAuditPassed_DropsItsSchema()
    {
        var runId = NewRunId();
        var log = new StringWriter();

        var result = await SmokeStorm.RunAsync(new PostgresStoreProvider(ConnectionString, IntegrationHooks.RequirePostgresStore(), log: log), runId: runId);

        result.Audit!.Passed.Should().BeTrue();
        (await SchemaExistsAsync("lt_" + runId)).Should().BeFalse();
        log.ToString().Should().BeEmpty();
    }

    [Fact]
    public async Task Run_WithKeepSchemas_KeepsItsSchemaAndNamesIt()
    {
        var runId = NewRunId();
        var log = new StringWriter();
        try
        {
            var result = await SmokeStorm.RunAsync(new PostgresStoreProvider(ConnectionString, IntegrationHooks.RequirePostgresStore(), keepSchemas: true, log: log), runId: runId);

            result.Audit!.Passed.Should().BeTrue();
            (await SchemaExistsAsync("lt_" + runId)).Should().BeTrue();
            log.ToString().Should().Contain("lt_" + runId).And.Contain("--keep-schemas");
        }
        finally
        {
            await DropSchemaAsync("lt_" + runId);
        }
    }

    [Fact]
    public async Task Session_EndedWithoutAnAudit_KeepsItsSchemaForInspection()
    {
        var runId = NewRunId();
        var log = new StringWriter();
        try
        {
            var provider = new PostgresStoreProvider(ConnectionString, IntegrationHooks.RequirePostgresStore(), log: log);
            var session = await provider.OpenAsync(new StoreSessionOptions(runId, TimeSpan.Zero), CancellationToken.None);
            await session.DisposeAsync();

            (await SchemaExistsAsync("lt_" + runId)).Should().BeTrue();
            log.ToString().Should().Contain("lt_" + runId).And.Contain("did not pass or did not run");
        }
        finally
        {
            await DropSchemaAsync("lt_" + runId);
        }
    }

    private static string NewRunId() => "t" + Guid.NewGuid().ToString("N")[..10];

    private static async Task<bool> SchemaExistsAsync(string schema)
    {
        await using var dataSource = NpgsqlDataSource.Create(ConnectionString);
        await using var command = dataSource.CreateCommand("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)");
        command.Parameters.Add(new NpgsqlParameter { Value = schema });
        return (bool)(await command.ExecuteScalarAsync())!;
    }

    private static async Task DropSchemaAsync(string schema)
    {
        await using var dataSource = NpgsqlDataSource.Create(ConnectionString);
        (await PostgresStoreProvider.DropSchemaAsync(dataSource, schema)).Should().BeNull();
    }
}
