using Allocator.Storage.Conformance;
using Allocator.Storage.SqlServer.Internal;
using Allocator.Storage.SqlServer.Tests.Infrastructure;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>
/// The pool directory and pool removal (issue 23) against a live SQL Server
/// (ALLOCATOR_SQLSERVER_CONNECTION); skipped with the reason otherwise (no engine here: the
/// scripts are parsed by ParsedSqlTests).
/// </summary>
[RequiresSqlServer]
public sealed class SqlServerPlacementConformanceTests : PoolPlacementConformanceTests
{
    protected override IPoolChangeFeed Changes => (SqlServerWorkerStore)Store;

    protected override async Task<IWorkerStore> CreateStoreAsync() =>
        await SqlServerWorkerStore.CreateAsync(new SqlServerWorkerStoreOptions
        {
            ConnectionString = SqlServerTestEnvironment.ConnectionString ?? throw new InvalidOperationException(SqlServerTestEnvironment.SkipReason),
            Schema = "t_" + Guid.NewGuid().ToString("N")[..16],
            LockTimeout = TimeSpan.FromSeconds(2),
            CommandTimeout = TimeSpan.FromSeconds(20),
        });

    protected override async Task DisposeStoreAsync(IWorkerStore store)
    {
        if (store is IAsyncDisposable disposable)
        {
            await disposable.DisposeAsync();
        }
    }
}
