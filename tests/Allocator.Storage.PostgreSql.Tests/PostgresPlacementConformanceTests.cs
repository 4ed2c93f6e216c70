using Allocator.Storage.Conformance;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>The pool directory and pool removal (issue 23) on PostgreSQL, each test class instance in its own schema.</summary>
public sealed class PostgresPlacementConformanceTests : PoolPlacementConformanceTests
{
    private string _schema = "";

    protected override IPoolChangeFeed Changes => (PostgresWorkerStore)Store;

    protected override async Task<IWorkerStore> CreateStoreAsync()
    {
        _schema = PostgresTestDatabase.NewSchema();
        return await PostgresTestDatabase.CreateStoreAsync(_schema);
    }

    protected override async Task DisposeStoreAsync(IWorkerStore store)
    {
        await ((PostgresWorkerStore)store).DisposeAsync();
        await PostgresTestDatabase.DropSchemaAsync(_schema);
    }
}
