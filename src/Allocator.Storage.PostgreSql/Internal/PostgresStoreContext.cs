using Npgsql;
using static Allocator.Storage.PostgreSql.Internal.PostgresParameters;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// What the PostgreSQL store's operation families share: the data source, the scripts, the retry
/// policy, the NOTIFY channel, the settings derived from the options, and the pool settings (read
/// fresh, or through the cache the hot paths use).
/// </summary>
internal sealed class PostgresStoreContext
{
    /// <summary>The store's short name (<see cref="IWorkerStore.Name"/>), also on its spans.</summary>
    public const string StoreName = "postgres";

    public PostgresStoreContext(NpgsqlDataSource dataSource, PostgresWorkerStoreOptions options, TimeProvider time)
    {
        DataSource = dataSource;
        Options = options;
        Sql = new SqlScripts(options.Schema);
        Time = time;
        LockTimeoutSetting = $"{Math.Max(1, (long)options.LockTimeout.TotalMilliseconds)}ms";
        RetentionMs = (long)options.HistoryRetention.TotalMilliseconds;
        Channel = options.Schema + ".pool_changes";
        Retry = new PostgresRetryPolicy(options, time, ForgetSettings);
        SettingsCache = new PoolSettingsCache(ReadSettingsAsync, changes: null, options.SettingsCacheDuration, time);
    }

    public NpgsqlDataSource DataSource { get; }

    public PostgresWorkerStoreOptions Options { get; }

    public SqlScripts Sql { get; }

    public TimeProvider Time { get; }

    /// <summary>The blocking statement's lock_timeout, as <c>set_config</c> takes it.</summary>
    public string LockTimeoutSetting { get; }

    /// <summary>
    /// The driver's own command timeout: none. Each attempt ends at the command timeout through
    /// <see cref="StatementDeadline"/> (in the retry policy); the driver's would cancel the
    /// statement on a shared thread-pool thread, held while a hung server does not answer.
    /// </summary>
    public const int DriverCommandTimeout = 0;

    /// <summary><see cref="PostgresWorkerStoreOptions.HistoryRetention"/> in milliseconds, as the scripts take it.</summary>
    public long RetentionMs { get; }

    /// <summary>The NOTIFY channel of this schema.</summary>
    public string Channel { get; }

    public PostgresRetryPolicy Retry { get; }

    /// <summary>The pool settings cache of this store (dropped entries on settings notifications and on a pool found missing).</summary>
    public PoolSettingsCache SettingsCache { get; }

    /// <summary>A pool's settings through the cache (the hot paths' read).</summary>
    public async Task<PoolSettings?> LoadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        await SettingsCache.GetAsync(poolId, cancellationToken);

    /// <summary>One fresh read of a pool's settings (the cache's loader, and <see cref="PostgresPools.GetPoolAsync"/>).</summary>
    public Task<PoolSettings?> ReadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        Retry.RunAsync(async ct =>
        {
            await using var command = Command("get_pool", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? PostgresRowReaders.ReadSettings(reader, 0, placementAt: 5) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);

    public void ForgetSettings(string poolId) => SettingsCache.Invalidate(poolId);

    /// <summary>Throws <see cref="AllocatorErrorKind.NotFound"/> when the pool does not exist (a pool-scoped call that found nothing).</summary>
    public async Task EnsurePoolAsync(string poolId, CancellationToken cancellationToken)
    {
        if (await LoadSettingsAsync(poolId, cancellationToken) is null)
        {
            throw AllocatorException.PoolNotFound(poolId);
        }
    }

    /// <summary>A command running the script <paramref name="script"/>, with a parameter of its own per argument (run it inside <see cref="PostgresRetryPolicy.RunAsync{T}"/>, which times it out).</summary>
    public NpgsqlCommand Command(string script, params object?[] args)
    {
        var command = DataSource.CreateCommand(Sql.Get(script));
        command.CommandTimeout = DriverCommandTimeout;
        foreach (var arg in args)
        {
            command.Parameters.Add(Parameter(arg));
        }

        return command;
    }

    /// <summary>One statement of a batch running the script <paramref name="script"/> (the batch has the timeout).</summary>
    public NpgsqlBatchCommand BatchCommand(string script, params object?[] args)
    {
        var command = new NpgsqlBatchCommand(Sql.Get(script));
        foreach (var arg in args)
        {
            command.Parameters.Add(Parameter(arg));
        }

        return command;
    }
}
