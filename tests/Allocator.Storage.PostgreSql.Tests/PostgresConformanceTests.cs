using Allocator.Storage.Conformance;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>The shared conformance suite against PostgreSQL, each test class instance in its own schema.</summary>
public sealed class PostgresConformanceTests : WorkerStoreConformanceTests
{
    private string _schema = "";

    protected override IPoolChangeFeed Changes => (PostgresWorkerStore)Store;

    protected override async Task<IWorkerStore> CreateStoreAsync()
    {
        _schema = PostgresTestDatabase.NewSchema();
        return await PostgresTestDatabase.CreateStoreAsync(_schema);
    }

    protected override Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId) =>
        PostgresTestDatabase.HoldRowLockAsync(_schema, poolId, workerId);

    protected override Task ExpireLeaseAsync(string poolId, Guid allocationId) =>
        PostgresTestDatabase.ExecuteAsync(
            $"UPDATE \"{_schema}\".allocations SET expires_at = now() - interval '1 second' WHERE pool_id = $1 AND allocation_id = $2",
            poolId, allocationId);

    protected override async Task DisposeStoreAsync(IWorkerStore store)
    {
        await ((PostgresWorkerStore)store).DisposeAsync();
        await PostgresTestDatabase.DropSchemaAsync(_schema);
    }
}
