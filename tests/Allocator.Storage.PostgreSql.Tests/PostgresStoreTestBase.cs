namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>A fresh, migrated schema and store for each test.</summary>
public abstract class PostgresStoreTestBase : IAsyncLifetime
{
    internal string Schema { get; } = PostgresTestDatabase.NewSchema();

    internal PostgresWorkerStore Store { get; private set; } = null!;

    protected virtual void Configure(PostgresWorkerStoreOptions options)
    {
    }

    public async Task InitializeAsync() => Store = await PostgresTestDatabase.CreateStoreAsync(Schema, Configure);

    public async Task DisposeAsync()
    {
        await Store.DisposeAsync();
        await PostgresTestDatabase.DropSchemaAsync(Schema);
    }

    protected async Task CreatePoolAsync(string poolId, int workers, int capacity, PoolSettings? settings = null, IReadOnlyList<string>? tags = null)
    {
        await Store.UpsertPoolAsync(poolId, settings ?? PoolSettings.Default);
        if (workers > 0)
        {
            await Store.RegisterWorkersAsync(poolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i:D3}", $"10.0.0.{i}:7000", capacity, tags))]);
        }
    }

    /// <summary>Invariant 1: load equals the units of active allocations, per worker, and stays within capacity.</summary>
    protected async Task AssertLoadMatchesAllocationsAsync(string poolId)
    {
        await using var command = PostgresTestDatabase.DataSource.CreateCommand($"""
            SELECT w.worker_id, w.load, w.capacity, coalesce((SELECT sum(a.units) FROM "{Schema}".allocations a
                WHERE a.pool_id = w.pool_id AND a.worker_id = w.worker_id), 0)::integer
              FROM "{Schema}".workers w WHERE w.pool_id = $1
            """);
        command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = poolId });
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            reader.GetInt32(1).Should().Be(reader.GetInt32(3), $"worker {reader.GetString(0)}'s load must equal its active units");
            reader.GetInt32(1).Should().BeInRange(0, reader.GetInt32(2));
        }
    }
}
