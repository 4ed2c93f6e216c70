using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// The test cluster from <c>ALLOCATOR_POSTGRES</c> and a fresh schema per test class. A missing
/// variable fails the test (never a skip): CI must not go green without PostgreSQL.
/// </summary>
internal static class PostgresTestDatabase
{
    public const string Variable = "ALLOCATOR_POSTGRES";

    private static readonly Lazy<NpgsqlDataSource> Shared = new(() => NpgsqlDataSource.Create(ConnectionString));

    public static string ConnectionString =>
        Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException(
                $"Environment variable {Variable} is not set. Start PostgreSQL with eng/postgres.sh and export its connection string, " +
                "e.g. ALLOCATOR_POSTGRES=\"Host=127.0.0.1;Port=55432;Username=postgres;Database=allocator\".");

    /// <summary>
    /// Built as a store builds its own (no reset on reuse, statements prepared from their second
    /// use), so the stores under test run their statements as a deployed store does.
    /// </summary>
    private static readonly Lazy<NpgsqlDataSource> SharedForStores = new(() => PostgresWorkerStore.BuildDataSource(ConnectionString));

    /// <summary>One data source for the whole test run (its pool is shared by all test classes).</summary>
    public static NpgsqlDataSource DataSource => Shared.Value;

    /// <summary>The data source of the stores <see cref="CreateStoreAsync"/> makes; tests that change session settings use <see cref="DataSource"/>, which resets them.</summary>
    public static NpgsqlDataSource StoreDataSource => SharedForStores.Value;

    public static string NewSchema() => "t_" + Guid.NewGuid().ToString("N")[..16];

    public static async Task<PostgresWorkerStore> CreateStoreAsync(string? schema = null, Action<PostgresWorkerStoreOptions>? configure = null)
    {
        var options = new PostgresWorkerStoreOptions { DataSource = StoreDataSource, Schema = schema ?? NewSchema(), RetryJitter = TimeSpan.FromMilliseconds(2) };
        configure?.Invoke(options);
        return await PostgresWorkerStore.CreateAsync(options);
    }

    public static async Task DropSchemaAsync(string schema)
    {
        await using var command = DataSource.CreateCommand($"DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        await command.ExecuteNonQueryAsync();
    }

    /// <summary>
    /// Takes a worker's row lock from a second connection in an open transaction, as another
    /// allocator would, until disposed (then ROLLBACK).
    /// </summary>
    public static async Task<IAsyncDisposable> HoldRowLockAsync(string schema, string poolId, string workerId)
    {
        var connection = await DataSource.OpenConnectionAsync();
        var transaction = await connection.BeginTransactionAsync();
        await using (var command = new NpgsqlCommand($"SELECT 1 FROM \"{schema}\".workers WHERE pool_id = $1 AND worker_id = $2 FOR UPDATE", connection, transaction))
        {
            command.Parameters.Add(new NpgsqlParameter { Value = poolId });
            command.Parameters.Add(new NpgsqlParameter { Value = workerId });
            var found = await command.ExecuteScalarAsync();
            if (found is null)
            {
                throw new InvalidOperationException($"Worker '{workerId}' of pool '{poolId}' not found in schema {schema}; no lock taken.");
            }
        }

        return new RowLock(connection, transaction);
    }

    public static async Task ExecuteAsync(string sql, params object[] args)
    {
        await using var command = DataSource.CreateCommand(sql);
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        await command.ExecuteNonQueryAsync();
    }

    private sealed class RowLock(NpgsqlConnection connection, NpgsqlTransaction transaction) : IAsyncDisposable
    {
        private int _disposed;

        public async ValueTask DisposeAsync()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0)
            {
                return;
            }

            await transaction.RollbackAsync();
            await transaction.DisposeAsync();
            await connection.DisposeAsync();
        }
    }
}
