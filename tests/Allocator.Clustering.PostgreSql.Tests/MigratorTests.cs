using System.Reflection;
using Npgsql;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>The clustering schema's migrator: once, concurrently, checksums, query upsert. Each test its own schema.</summary>
public sealed class MigratorTests : IAsyncLifetime
{
    private readonly string _schema = ClusteringTestDatabase.NewSchema();

    private static ClusteringScripts Embedded => ClusteringScripts.Embedded;

    public Task InitializeAsync() => Task.CompletedTask;

    public Task DisposeAsync() => ClusteringTestDatabase.DropSchemaAsync(_schema);

    [Fact]
    public async Task Migrate_FreshSchema_AppliesEveryMigrationAndWritesEveryQuery_ThenNothingTheSecondTime()
    {
        var first = await MigrateAsync(Embedded);
        first.MigrationsApplied.Should().Be(Embedded.Migrations.Count);
        first.QueriesUpdated.Should().Be(Embedded.Queries.Count);

        var second = await MigrateAsync(Embedded);
        second.Should().Be(new ClusteringMigrationResult(0, 0));
        await PostgresClusteringSchema.EnsureCreatedAsync(ClusteringTestDatabase.Options(_schema));

        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".schema_migrations")).Should().Be(Embedded.Migrations.Count);
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".orleansquery")).Should().Be(Embedded.Queries.Count);
        (await ClusteringTestDatabase.ScalarAsync<string>($"SELECT checksum FROM \"{_schema}\".schema_migrations WHERE version = 1"))
            .Should().Be(Embedded.Migrations[0].Checksum).And.MatchRegex("^[0-9a-f]{64}$");
    }

    [Fact]
    public async Task Migrate_ConcurrentStarts_ApplyEachMigrationAndQueryOnce()
    {
        var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var runs = Enumerable.Range(0, 8).Select(_ => Task.Run(async () =>
        {
            await start.Task;
            return await MigrateAsync(Embedded);
        })).ToList();
        start.SetResult();
        var results = await Task.WhenAll(runs).WaitAsync(TimeSpan.FromSeconds(60));

        results.Sum(r => r.MigrationsApplied).Should().Be(Embedded.Migrations.Count, "the runs queue on the advisory lock and only the first applies anything");
        results.Sum(r => r.QueriesUpdated).Should().Be(Embedded.Queries.Count);
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".schema_migrations")).Should().Be(Embedded.Migrations.Count);
    }

    [Fact]
    public async Task Migrate_AppliedMigrationEdited_FailsLoudlyAndChangesNothing()
    {
        await MigrateAsync(Embedded);
        var original = Embedded.Migrations[0];
        var edited = new ClusteringScripts(
            [original with { Sql = original.Sql + "\nCREATE TABLE {schema}.sneaked_in (id integer);\n" }],
            Embedded.Queries.ToDictionary(q => q.Key, q => q.Value + "\n-- edited too"));

        var act = () => MigrateAsync(edited);

        (await act.Should().ThrowAsync<InvalidOperationException>())
            .WithMessage($"*{original.Name}*checksum {original.Checksum}*must never be edited*");
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".orleansquery WHERE querytext LIKE '%-- edited too'"))
            .Should().Be(0, "a failed run rolls back: the query texts were not replaced");
    }

    [Fact]
    public async Task Migrate_SchemaMigratedByNewerBuild_FailsAndLeavesQueriesAlone()
    {
        await MigrateAsync(Embedded);
        await ClusteringTestDatabase.ExecuteAsync($"INSERT INTO \"{_schema}\".schema_migrations (version, name, checksum) VALUES (9999, '9999_future', 'x')");
        var older = new ClusteringScripts(Embedded.Migrations, Embedded.Queries.ToDictionary(q => q.Key, q => "SELECT 'older build'"));

        var act = () => MigrateAsync(older);

        (await act.Should().ThrowAsync<InvalidOperationException>()).WithMessage("*9999*newer build*");
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".orleansquery WHERE querytext = 'SELECT ''older build'''"))
            .Should().Be(0);
    }

    [Fact]
    public async Task Migrate_NewMigration_IsAppliedOnceAfterTheOthers()
    {
        await MigrateAsync(Embedded);
        var next = new ClusteringScripts(
            [.. Embedded.Migrations, new ClusteringMigration(Embedded.Migrations[^1].Version + 1, "0099_extra", "CREATE TABLE {schema}.extra (id integer);")],
            Embedded.Queries);

        (await MigrateAsync(next)).Should().Be(new ClusteringMigrationResult(1, 0));
        (await MigrateAsync(next)).Should().Be(new ClusteringMigrationResult(0, 0));
        (await ClusteringTestDatabase.ScalarAsync<long>($"SELECT count(*) FROM \"{_schema}\".extra")).Should().Be(0, "the table exists");
    }

    [Fact]
    public async Task Migrate_QueryTextChanged_IsUpsertedAtTheNextStart()
    {
        await MigrateAsync(Embedded);
        var key = "GatewaysQueryKey";
        var changed = Embedded.Queries.ToDictionary(q => q.Key, q => q.Key == key ? q.Value + "\n-- v2" : q.Value);

        (await MigrateAsync(new ClusteringScripts(Embedded.Migrations, changed))).Should().Be(new ClusteringMigrationResult(0, 1));
        (await QueryTextAsync(key)).Should().Be(changed[key]);

        // A text changed in the database by hand is put back by the next start of this build.
        await ClusteringTestDatabase.ExecuteAsync($"UPDATE \"{_schema}\".orleansquery SET querytext = 'SELECT 1' WHERE querykey = 'MembershipReadAllKey'");
        (await MigrateAsync(Embedded)).Should().Be(new ClusteringMigrationResult(0, 2));
        (await QueryTextAsync(key)).Should().Be(Embedded.Queries[key]);
        (await QueryTextAsync("MembershipReadAllKey")).Should().Be(Embedded.Queries["MembershipReadAllKey"]);
    }

    [Fact]
    public void QueryFiles_CoverEveryQueryKeyTheProviderRequires()
    {
        // The provider refuses to start unless orleansquery holds every key its DbStoredQueries
        // declares (its non-public instance properties); read that list from the provider itself,
        // so an Orleans upgrade that adds a key fails here, by name.
        var storedQueries = typeof(Orleans.Runtime.MembershipService.AdoNetClusteringTable).Assembly
            .GetType("Orleans.Clustering.AdoNet.Storage.DbStoredQueries", throwOnError: true)!;
        var required = storedQueries.GetProperties(BindingFlags.Instance | BindingFlags.NonPublic).Select(p => p.Name).ToList();

        required.Should().NotBeEmpty();
        Embedded.Queries.Keys.Should().BeEquivalentTo(required);
    }

    [Fact]
    public void Checksum_IgnoresLineEndings_AndSeesAnyOtherEdit()
    {
        var text = "CREATE TABLE {schema}.t (id integer);\n-- why\n";

        ClusteringScripts.Checksum(text.Replace("\n", "\r\n", StringComparison.Ordinal)).Should().Be(ClusteringScripts.Checksum(text));
        ClusteringScripts.Checksum(text + " ").Should().NotBe(ClusteringScripts.Checksum(text));
    }

    private Task<ClusteringMigrationResult> MigrateAsync(ClusteringScripts scripts) =>
        ClusteringSchemaMigrator.MigrateAsync(ClusteringTestDatabase.ConnectionString, _schema, scripts, CancellationToken.None);

    private Task<string?> QueryTextAsync(string key) =>
        ClusteringTestDatabase.ScalarAsync<string>($"SELECT querytext FROM \"{_schema}\".orleansquery WHERE querykey = $1", key);
}

public sealed class OptionsTests
{
    [Theory]
    [InlineData("Cluster")]
    [InlineData("bad-name")]
    [InlineData("x\"; DROP TABLE y; --")]
    [InlineData("")]
    [InlineData("1abc")]
    [InlineData("pg_cluster")]
    [InlineData("a234567890123456789012345678901234567890123456789012345678901234")]
    public async Task EnsureCreated_SchemaNotALowerCaseIdentifier_IsRejectedBeforeAnyConnection(string schema)
    {
        var act = () => PostgresClusteringSchema.EnsureCreatedAsync(new PostgresClusteringOptions { ConnectionString = "Host=192.0.2.1;Timeout=1", Schema = schema });

        (await act.Should().ThrowAsync<ArgumentException>()).WithMessage($"*{schema}*");
    }

    [Fact]
    public void Defaults_AreDocumented()
    {
        var options = new PostgresClusteringOptions();

        options.Schema.Should().Be("allocator_cluster").And.Be(PostgresClusteringOptions.DefaultSchema);
        options.ConnectionString.Should().BeNull();
    }

    [Fact]
    public async Task EnsureCreated_MissingConnectionString_FailsClearly()
    {
        var act = () => PostgresClusteringSchema.EnsureCreatedAsync(new PostgresClusteringOptions());

        await act.Should().ThrowAsync<ArgumentException>().WithMessage("*ConnectionString*");
    }

    [Fact]
    public void Validate_MalformedConnectionString_DoesNotEchoIt()
    {
        var act = () => new PostgresClusteringOptions { ConnectionString = "Host=db;Password=secret-pw;NoSuchKeyword=1" }.Validate();

        act.Should().Throw<ArgumentException>().Which.ToString().Should().NotContain("secret-pw");
    }

    [Fact]
    public void ProviderConnectionString_SetsTheSearchPathToTheSchemaAlone()
    {
        var options = new PostgresClusteringOptions
        {
            ConnectionString = "Host=db.example;Port=5433;Username=app;Password=pw;Database=allocator;Search Path=public,other",
            Schema = "cluster_a",
        };

        var built = new NpgsqlConnectionStringBuilder(options.ProviderConnectionString());

        built.SearchPath.Should().Be("cluster_a");
        built.Host.Should().Be("db.example");
        built.Port.Should().Be(5433);
        built.Database.Should().Be("allocator");
        built.Password.Should().Be("pw");
    }
}
