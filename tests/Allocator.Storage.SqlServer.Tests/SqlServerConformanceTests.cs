using Allocator.Storage.Conformance;
using Allocator.Storage.SqlServer.Internal;
using Allocator.Storage.SqlServer.Tests.Infrastructure;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Tests;

/// <summary>
/// The conformance suite against a live SQL Server (ALLOCATOR_SQLSERVER_CONNECTION); skipped
/// with the reason otherwise. Each test class instance gets its own schema.
/// </summary>
[RequiresSqlServer]
public sealed class SqlServerConformanceTests : WorkerStoreConformanceTests
{
    private readonly string _schema = "t_" + Guid.NewGuid().ToString("N")[..16];

    private static string ConnectionString => SqlServerTestEnvironment.ConnectionString
        ?? throw new InvalidOperationException(SqlServerTestEnvironment.SkipReason);

    protected override IPoolChangeFeed Changes => (SqlServerWorkerStore)Store;

    protected override async Task<IWorkerStore> CreateStoreAsync() =>
        await SqlServerWorkerStore.CreateAsync(new SqlServerWorkerStoreOptions
        {
            ConnectionString = ConnectionString,
            Schema = _schema,
            LockTimeout = TimeSpan.FromSeconds(2),
            CommandTimeout = TimeSpan.FromSeconds(20),
        });

    protected override async Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId)
    {
        // A second connection in an open transaction holding the worker's row lock, as another
        // allocator instance mid-statement would; rolled back when disposed.
        var connection = new SqlConnection(ConnectionString);
        await connection.OpenAsync();
        var transaction = connection.BeginTransaction();
        // Both keys an allocating transaction holds: the clustered key and the eligible-index key
        // (allocation reads that index with READPAST, so a clustered-only lock would not be seen).
        var schema = SqlIdentifier.Quote(_schema);
        await using (var command = new SqlCommand(
            $"""
            DECLARE @score bigint;
            SELECT @score = w.score FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK)
            WHERE w.pool_id = @pool_id AND w.worker_id = @worker_id;
            SELECT @score = w.score FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK, INDEX(ix_workers_eligible))
            WHERE w.pool_id = @pool_id AND w.state = 0 AND w.score = @score AND w.worker_id = @worker_id;
            SELECT @score;
            """,
            connection, transaction))
        {
            command.Parameters.Add(new SqlParameter("@pool_id", System.Data.SqlDbType.NVarChar, 128) { Value = poolId });
            command.Parameters.Add(new SqlParameter("@worker_id", System.Data.SqlDbType.NVarChar, 128) { Value = workerId });
            (await command.ExecuteScalarAsync()).Should().NotBe(DBNull.Value, $"worker '{workerId}' must exist in pool '{poolId}' to be locked");
        }

        return new RowLockHold(connection, transaction);
    }

    protected override async Task ExpireLeaseAsync(string poolId, Guid allocationId)
    {
        await using var connection = new SqlConnection(ConnectionString);
        await connection.OpenAsync();
        await using var command = new SqlCommand(
            $"UPDATE {SqlIdentifier.Quote(_schema)}.allocations SET expires_at = DATEADD(second, -1, SYSUTCDATETIME()) WHERE pool_id = @pool_id AND allocation_id = @allocation_id;",
            connection);
        command.Parameters.Add(new SqlParameter("@pool_id", System.Data.SqlDbType.NVarChar, 128) { Value = poolId });
        command.Parameters.Add(new SqlParameter("@allocation_id", System.Data.SqlDbType.UniqueIdentifier) { Value = allocationId });
        (await command.ExecuteNonQueryAsync()).Should().Be(1, "the allocation must exist to expire its lease");
    }

    protected override async Task DisposeStoreAsync(IWorkerStore store)
    {
        if (store is IAsyncDisposable disposable)
        {
            await disposable.DisposeAsync();
        }
    }

    [Fact]
    public async Task Migrate_Twice_AppliesNothingTheSecondTime()
    {
        var options = new SqlServerWorkerStoreOptions { ConnectionString = ConnectionString, Schema = _schema };
        var store = new SqlServerWorkerStore(options);
        await using var connection = await store.OpenAsync(CancellationToken.None);
        var applied = await SqlServerMigrator.MigrateAsync(connection, store.Commands, _schema, TimeSpan.FromSeconds(5), CancellationToken.None);
        applied.Should().BeEmpty("CreateStoreAsync already migrated this schema");
    }

    [Fact]
    public async Task Allocate_PicksLeastLoadedThenLowestId()
    {
        await Store.UpsertPoolAsync("p", PoolSettings.Default);
        await Store.RegisterWorkersAsync("p", [new("b", "b:1", 10), new("a", "a:1", 10), new("c", "c:1", 20)]);
        var outcomes = await Store.AllocateAsync("p", [new("s1"), new("s2"), new("s3"), new("s1")]);
        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Allocated, AllocationStatus.Allocated, AllocationStatus.Existing);
        // Water filling: a (0), then b (0), then c (0 < a's and b's 1/10).
        outcomes.Take(3).Select(o => o.Allocation!.WorkerId).Should().Equal("a", "b", "c");
        outcomes[3].Allocation!.AllocationId.Should().Be(outcomes[0].Allocation!.AllocationId);
    }

    [Fact]
    public async Task Release_WithStaleEpoch_ChangesNothing_ThenReleasesWithCurrent()
    {
        await Store.UpsertPoolAsync("p", PoolSettings.Default);
        await Store.RegisterWorkersAsync("p", [new("a", "a:1", 1)]);
        var allocation = (await Store.AllocateAsync("p", [new("s")]))[0].Allocation!;
        var renewed = await Store.RenewAsync("p", allocation.AllocationId, allocation.Epoch, TimeSpan.FromMinutes(1));
        renewed.Status.Should().Be(LeaseStatus.Ok);
        renewed.Allocation!.Epoch.Should().BeGreaterThan(allocation.Epoch);
        (await Store.ReleaseAsync("p", allocation.AllocationId, allocation.Epoch)).Status.Should().Be(LeaseStatus.StaleEpoch);
        (await Store.ReleaseAsync("p", allocation.AllocationId, renewed.Allocation.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        (await Store.GetWorkerAsync("p", "a"))!.Load.Should().Be(0);
    }

    private sealed class RowLockHold(SqlConnection connection, SqlTransaction transaction) : IAsyncDisposable
    {
        public async ValueTask DisposeAsync()
        {
            transaction.Rollback();
            await transaction.DisposeAsync();
            await connection.DisposeAsync();
        }
    }
}
