namespace Allocator.Storage.PostgreSql.Tests;

public sealed class MigrationTests
{
    [Fact]
    public async Task Migrate_RunConcurrently_AppliesEachMigrationOnce()
    {
        var schema = PostgresTestDatabase.NewSchema();
        try
        {
            var start = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            var runs = Enumerable.Range(0, 8).Select(_ => Task.Run(async () =>
            {
                await start.Task;
                return await SchemaMigrator.MigrateAsync(PostgresTestDatabase.DataSource, schema, CancellationToken.None);
            })).ToList();
            start.SetResult();
            var applied = await Task.WhenAll(runs).WaitAsync(TimeSpan.FromSeconds(30));
            var expected = new SqlScripts(schema).Migrations().Count;
            applied.Sum().Should().Be(expected, "the migrators queue on the advisory lock and only the first applies anything");
            (await SchemaMigrator.MigrateAsync(PostgresTestDatabase.DataSource, schema, CancellationToken.None)).Should().Be(0);

            await using var command = PostgresTestDatabase.DataSource.CreateCommand($"SELECT count(*) FROM \"{schema}\".schema_migrations");
            ((long)(await command.ExecuteScalarAsync())!).Should().Be(expected);
        }
        finally
        {
            await PostgresTestDatabase.DropSchemaAsync(schema);
        }
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
}
