using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// What the SQL Server store's operation families share: the connection string, the command
/// factory (the embedded scripts), the retry policy, the change feed (changes made through this
/// instance are raised in process at once) and the pool settings (read fresh, or through the
/// cache the hot paths use).
/// </summary>
internal sealed class SqlServerStoreContext
{
    /// <summary>The store's short name (<see cref="IWorkerStore.Name"/>), also on its spans.</summary>
    public const string StoreName = "sqlserver";

    public SqlServerStoreContext(string connectionString, SqlServerCommandFactory commands, SqlServerWorkerStoreOptions options, TimeProvider time)
    {
        ConnectionString = connectionString;
        Commands = commands;
        Options = options;
        Time = time;
        Retry = new SqlServerRetryPolicy(OpenAsync, commands, options, time);
        Changes = new SqlServerChangeFeed(this, options, time);
        SettingsCache = new PoolSettingsCache(ReadSettingsAsync, changes: null, options.SettingsCacheDuration, time);
    }

    public string ConnectionString { get; }

    public SqlServerCommandFactory Commands { get; }

    public SqlServerWorkerStoreOptions Options { get; }

    public TimeProvider Time { get; }

    public SqlServerRetryPolicy Retry { get; }

    public SqlServerChangeFeed Changes { get; }

    /// <summary>The pool settings cache of this store; the change feed drops entries on settings changes.</summary>
    public PoolSettingsCache SettingsCache { get; }

    /// <summary>One fresh read of a pool's settings (the cache's loader, and <see cref="SqlServerPools.GetPoolAsync"/>).</summary>
    public Task<PoolSettings?> ReadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        RunAsync(poolId, () => Commands.GetPool(poolId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadSettings(reader) : null, cancellationToken);

    /// <summary>Opens a connection, one attempt (the retry policy's opener; the conformance tests' migrator check).</summary>
    public async Task<SqlConnection> OpenAsync(CancellationToken cancellationToken)
    {
        var connection = new SqlConnection(ConnectionString);
        try
        {
            await connection.OpenAsync(cancellationToken);
            return connection;
        }
        catch
        {
            await connection.DisposeAsync();
            throw;
        }
    }

    /// <summary>One script through the retry policy: <paramref name="build"/> makes its command (again for each attempt), <paramref name="read"/> reads its result.</summary>
    public Task<T> RunAsync<T>(string? poolId, Func<SqlCommand> build, Func<SqlDataReader, CancellationToken, Task<T>> read, CancellationToken cancellationToken) =>
        Retry.RunAsync(poolId, build, read, cancellationToken);
}
