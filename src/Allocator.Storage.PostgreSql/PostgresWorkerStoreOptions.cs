using Allocator.Storage.PostgreSql.Internal;

namespace Allocator.Storage.PostgreSql;

/// <summary>Options of the PostgreSQL worker store. Every default is documented on its property.</summary>
public sealed class PostgresWorkerStoreOptions
{
    /// <summary>The configuration key the host reads the connection string from, named in start-up errors.</summary>
    public const string ConnectionStringSetting = "ConnectionStrings:Allocator";

    /// <summary>
    /// Connection string of the data source the store builds for itself (with
    /// <c>No Reset On Close</c>, see docs/postgresql.md), used when <see cref="DataSource"/> is
    /// not set. Never logged. Default: none.
    /// </summary>
    public string? ConnectionString { get; set; }

    /// <summary>
    /// A data source owned by the caller (e.g. one registered with Npgsql's
    /// <c>AddNpgsqlDataSource</c>); the store then builds none and does not dispose it. Build it
    /// with <c>No Reset On Close=true</c> unless other code leaves session state on its
    /// connections: the default reset discards the store's cached plans on every call. Set
    /// <c>Max Auto Prepare</c> (the store's own data source uses 64) unless a pooler in between
    /// cannot keep prepared statements. Default: none.
    /// </summary>
    public Npgsql.NpgsqlDataSource? DataSource { get; set; }

    /// <summary>
    /// Where Npgsql logs, for the data source the store builds itself (not for <see cref="DataSource"/>).
    /// <c>AddAllocatorPostgres</c> sets the host's logger factory, so Npgsql's own lines reach the
    /// console and OTLP with the rest. Default: none (Npgsql does not log).
    /// </summary>
    public Microsoft.Extensions.Logging.ILoggerFactory? LoggerFactory { get; set; }

    /// <summary>
    /// The name of the database this store serves among the host's databases
    /// (<c>Allocator:Databases:{name}</c>, issue 23), carried by the store's spans as
    /// <c>allocator.database</c> and named in its start-up errors. Default: none (not tagged).
    /// </summary>
    public string? Database { get; set; }

    /// <summary>
    /// Schema holding the store's tables (created by the migrations). A plain identifier
    /// (<c>[A-Za-z_][A-Za-z0-9_]*</c>, at most 63 characters). Default: <c>allocator</c>.
    /// </summary>
    public string Schema { get; set; } = "allocator";

    /// <summary>Longest wait for a row lock in the blocking fallback and the strict strategy. Default: 2 s.</summary>
    public TimeSpan LockTimeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>Fresh skip-locked statements after one found only locked rows, before blocking. Default: 2.</summary>
    public int SkipRetries { get; set; } = 2;

    /// <summary>
    /// Retries of a statement that failed with a deadlock (40P01), a serialization failure
    /// (40001), a unique violation (23505) or a lock timeout (55P03). Default: 5.
    /// </summary>
    public int TransientRetries { get; set; } = 5;

    /// <summary>Upper bound of the random pause before each retry. Default: 5 ms.</summary>
    public TimeSpan RetryJitter { get; set; } = TimeSpan.FromMilliseconds(5);

    /// <summary>Command timeout; must exceed <see cref="LockTimeout"/> (timeouts nest). Default: 30 s.</summary>
    public TimeSpan CommandTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>How long pool settings (strategy, leases) are cached; a settings notification drops them at once. Default: 1 s.</summary>
    public TimeSpan SettingsCacheDuration { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// How long an ended allocation is kept in the history: for that long a replay of its session
    /// key answers the ended allocation (never a second one) and its id reads as ended; after
    /// it the reaper purges it. Default: 24 h.
    /// </summary>
    public TimeSpan HistoryRetention { get; set; } = TimeSpan.FromHours(24);

    /// <summary>Most history rows one purge statement deletes (the reaper runs up to 10 per reap). Default: 10,000.</summary>
    public int HistoryPurgeBatch { get; set; } = 10_000;

    /// <summary>
    /// How long the LISTEN connection may stay quiet before it is pinged; a ping that fails (or
    /// times out after as long) reopens it, so a half-open connection cannot stop notifications
    /// silently. Default: 10 s.
    /// </summary>
    public TimeSpan ListenKeepAlive { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Pause before the LISTEN connection is opened again after it dropped. Default: 1 s.</summary>
    public TimeSpan ListenReconnectDelay { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// Open the LISTEN connection when the store is created (the factory waits for it, bounded),
    /// rather than at the first subscription, so no change made right after subscribing is
    /// missed. Costs one dedicated connection per store. Default: true.
    /// </summary>
    public bool ListenForChanges { get; set; } = true;

    /// <summary>
    /// Data source for the dedicated LISTEN connection. Default: none — the store's data source,
    /// or, when that one multiplexes (which cannot LISTEN), a one-connection source built from
    /// its connection string (set this when that string lacks the password).
    /// </summary>
    public Npgsql.NpgsqlDataSource? ListenDataSource { get; set; }

    /// <summary>Apply the embedded migrations when the store is created. Default: true.</summary>
    public bool ApplyMigrations { get; set; } = true;

    /// <summary>Every problem with these options, each naming the option; empty when valid.</summary>
    public IReadOnlyList<string> Validate()
    {
        var errors = new List<string>();
        if (DataSource is null && string.IsNullOrWhiteSpace(ConnectionString))
        {
            errors.Add($"ConnectionString is empty and no DataSource is given: set {ConnectionStringSetting}.");
        }

        if (SchemaName.Check(Schema) is { } schemaError)
        {
            errors.Add(schemaError);
        }

        if (LockTimeout < TimeSpan.FromMilliseconds(1) || LockTimeout > TimeSpan.FromMinutes(10))
        {
            errors.Add("LockTimeout must be between 1 ms and 10 minutes.");
        }

        if (CommandTimeout <= LockTimeout || CommandTimeout > TimeSpan.FromHours(1))
        {
            errors.Add("CommandTimeout must be longer than LockTimeout (timeouts nest: lock < command < grain call < HTTP) and at most 1 hour.");
        }

        if (SkipRetries is < 0 or > 100 || TransientRetries is < 0 or > 100)
        {
            errors.Add("SkipRetries and TransientRetries must be between 0 and 100.");
        }

        if (ListenKeepAlive < TimeSpan.FromSeconds(1) || ListenKeepAlive > TimeSpan.FromHours(1))
        {
            errors.Add("ListenKeepAlive must be between 1 second and 1 hour.");
        }

        if (HistoryRetention < TimeSpan.FromMilliseconds(1) || HistoryRetention > TimeSpan.FromDays(366))
        {
            errors.Add("HistoryRetention must be between 1 ms and 366 days.");
        }

        if (HistoryPurgeBatch is < 1 or > 1_000_000)
        {
            errors.Add("HistoryPurgeBatch must be between 1 and 1,000,000.");
        }

        if (RetryJitter < TimeSpan.Zero || SettingsCacheDuration < TimeSpan.Zero || ListenReconnectDelay < TimeSpan.Zero)
        {
            errors.Add("RetryJitter, SettingsCacheDuration and ListenReconnectDelay must not be negative.");
        }

        return errors;
    }

    /// <summary>Throws <see cref="ArgumentException"/> naming every problem.</summary>
    internal void EnsureValid()
    {
        if (Validate() is { Count: > 0 } errors)
        {
            throw new ArgumentException("Invalid PostgreSQL store options: " + string.Join(" ", errors));
        }
    }
}
