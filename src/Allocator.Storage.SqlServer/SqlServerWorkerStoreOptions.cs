namespace Allocator.Storage.SqlServer;

/// <summary>Options of the SQL Server worker store. Every default is documented on its property.</summary>
public sealed class SqlServerWorkerStoreOptions
{
    /// <summary>The configuration key the host reads the connection string from.</summary>
    public const string ConnectionStringSetting = "ConnectionStrings:Allocator";

    /// <summary>SqlClient connection string (from <see cref="ConnectionStringSetting"/>). Required; never logged.</summary>
    public string ConnectionString { get; set; } = "";

    /// <summary>
    /// Database schema that holds the store's tables; created by the migrator when missing.
    /// 1–64 characters from <c>[A-Za-z0-9_]</c>, starting with a letter or underscore. Default: <c>allocator</c>.
    /// </summary>
    public string Schema { get; set; } = "allocator";

    /// <summary>
    /// The name of the database this store serves among the host's databases
    /// (<c>Allocator:Databases:{name}</c>, issue 23), carried by the store's spans as
    /// <c>allocator.database</c>. Default: none (not tagged).
    /// </summary>
    public string? Database { get; set; }

    /// <summary>
    /// <c>SET LOCK_TIMEOUT</c> of every command: the longest wait for a row lock in the blocking
    /// fallback and the strict strategy. Must be below <see cref="CommandTimeout"/>. Default: 5 s.
    /// </summary>
    public TimeSpan LockTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Client-side command timeout (SqlCommand.CommandTimeout, whole seconds); on expiry SqlClient
    /// sends an attention and, with <c>XACT_ABORT ON</c> in every script, the server rolls back.
    /// Also bounds opening a connection (every attempt together) and, unless the connection string
    /// sets <c>Connect Timeout</c>, each attempt's connect timeout. Every script gives itself a
    /// budget inside it (lock timeout + half the gap to this) and rolls back rather than commit
    /// past it. Default: 30 s.
    /// </summary>
    public TimeSpan CommandTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>
    /// Fresh attempts to open a connection after an attempt that failed without sending anything
    /// (refused, reset in the handshake, a transient login error, no pooled connection in time),
    /// all within <see cref="CommandTimeout"/>. Default: 3.
    /// </summary>
    public int OpenRetries { get; set; } = 3;

    /// <summary>Pause before the first fresh open, doubled for each further one (plus up to <see cref="RetryJitter"/>). Default: 100 ms.</summary>
    public TimeSpan OpenRetryDelay { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Connect timeout of the first connection the factory opens, so an unreachable server fails start-up fast. Default: 5 s.</summary>
    public TimeSpan StartupConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Fresh skip-locked statements after one found only locked rows with room, before the blocking fallback. Default: 2.</summary>
    public int SkipRetries { get; set; } = 2;

    /// <summary>Upper bound of the random pause before each skip retry and each deadlock retry. Default: 5 ms.</summary>
    public TimeSpan RetryJitter { get; set; } = TimeSpan.FromMilliseconds(5);

    /// <summary>Re-runs of a whole transaction chosen as a deadlock victim (1205) or beaten to a unique key (2601/2627). Default: 5.</summary>
    public int TransactionRetries { get; set; } = 5;

    /// <summary>
    /// How long an ended allocation is kept: for that long a replay of its session key answers the
    /// ended allocation (never a second one) and its id reads as ended; the reaper purges it
    /// afterwards. Default: 24 h.
    /// </summary>
    public TimeSpan HistoryRetention { get; set; } = TimeSpan.FromHours(24);

    /// <summary>Most ended allocations one reap purges. Default: 10,000.</summary>
    public int HistoryPurgeBatch { get; set; } = 10_000;

    /// <summary>How long pool settings (strategy, leases) are cached; a settings change seen by the change feed drops them at once. Default: 1 s.</summary>
    public TimeSpan SettingsCacheDuration { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Shortest pause between polls of the pool change counters (other instances' changes). Default: 100 ms.</summary>
    public TimeSpan ChangePollMinInterval { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Longest pause between polls; the pause doubles up to it while nothing changes. Default: 2 s.</summary>
    public TimeSpan ChangePollMaxInterval { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>Every problem with these options, each naming the option; empty when valid.</summary>
    public IReadOnlyList<string> Validate()
    {
        var errors = new List<string>();
        if (string.IsNullOrWhiteSpace(ConnectionString))
        {
            errors.Add($"ConnectionString is empty: set {ConnectionStringSetting}.");
        }
        else
        {
            try
            {
                _ = new Microsoft.Data.SqlClient.SqlConnectionStringBuilder(ConnectionString);
            }
            catch (ArgumentException ex)
            {
                errors.Add($"The SQL Server connection string ({ConnectionStringSetting}) is malformed: {ex.Message}");
            }
        }

        if (Internal.SqlIdentifier.Check(Schema) is { } schemaError)
        {
            errors.Add(schemaError);
        }

        if (LockTimeout < TimeSpan.FromMilliseconds(1) || LockTimeout > TimeSpan.FromMinutes(10))
        {
            errors.Add("LockTimeout must be between 1 ms and 10 minutes.");
        }

        if (CommandTimeout < TimeSpan.FromSeconds(1) || CommandTimeout > TimeSpan.FromHours(1))
        {
            errors.Add("CommandTimeout must be between 1 second and 1 hour.");
        }
        else if (LockTimeout >= CommandTimeout)
        {
            errors.Add("LockTimeout must be below CommandTimeout (timeouts nest: lock < command < grain call < HTTP).");
        }

        if (StartupConnectTimeout < TimeSpan.FromSeconds(1) || StartupConnectTimeout > TimeSpan.FromMinutes(5))
        {
            errors.Add("StartupConnectTimeout must be between 1 second and 5 minutes.");
        }

        if (SkipRetries is < 0 or > 100)
        {
            errors.Add("SkipRetries must be between 0 and 100.");
        }

        if (OpenRetries is < 0 or > 100)
        {
            errors.Add("OpenRetries must be between 0 and 100.");
        }

        if (OpenRetryDelay < TimeSpan.Zero || OpenRetryDelay > TimeSpan.FromSeconds(10))
        {
            errors.Add("OpenRetryDelay must be between 0 and 10 seconds.");
        }

        if (TransactionRetries is < 0 or > 100)
        {
            errors.Add("TransactionRetries must be between 0 and 100.");
        }

        if (RetryJitter < TimeSpan.Zero || RetryJitter > TimeSpan.FromSeconds(10))
        {
            errors.Add("RetryJitter must be between 0 and 10 seconds.");
        }

        if (HistoryRetention < TimeSpan.FromMilliseconds(1) || HistoryRetention > TimeSpan.FromDays(366))
        {
            errors.Add("HistoryRetention must be between 1 ms and 366 days.");
        }

        if (SettingsCacheDuration < TimeSpan.Zero || SettingsCacheDuration > TimeSpan.FromHours(1))
        {
            errors.Add("SettingsCacheDuration must be between 0 and 1 hour.");
        }

        if (HistoryPurgeBatch is < 1 or > 1_000_000)
        {
            errors.Add("HistoryPurgeBatch must be between 1 and 1,000,000.");
        }

        if (ChangePollMinInterval < TimeSpan.FromMilliseconds(10) || ChangePollMaxInterval < ChangePollMinInterval)
        {
            errors.Add("ChangePollMinInterval must be at least 10 ms and ChangePollMaxInterval at least ChangePollMinInterval.");
        }

        return errors;
    }

    internal void EnsureValid()
    {
        var errors = Validate();
        if (errors.Count > 0)
        {
            throw new ArgumentException("Invalid SQL Server store options: " + string.Join(" ", errors));
        }
    }
}
