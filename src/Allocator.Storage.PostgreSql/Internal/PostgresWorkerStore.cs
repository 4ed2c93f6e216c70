using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on PostgreSQL. Every operation is
/// one autocommit statement (one round trip); retries always run as fresh statements, never
/// inside a failed transaction. Registered with
/// <see cref="Microsoft.Extensions.DependencyInjection.PostgresServiceCollectionExtensions.AddAllocatorPostgres(Microsoft.Extensions.DependencyInjection.IServiceCollection, string, Action{PostgresWorkerStoreOptions}?)"/>;
/// <see cref="InitializeAsync"/> (migrations, the LISTEN connection) runs when the host starts.
/// </summary>
/// <remarks>
/// The operations live in one class per family, as in the other stores (docs/architecture.md,
/// "Where each operation lives"); they share the data source, scripts, retry policy and settings
/// cache through <see cref="PostgresStoreContext"/>.
/// </remarks>
internal sealed class PostgresWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolPlacementStore, IStoreReplication, IAsyncDisposable
{
    private readonly PostgresStoreContext _context;
    private readonly bool _ownsDataSource;
    private readonly PostgresChangeFeed _listener;
    private readonly PostgresPools _pools;
    private readonly PostgresWorkers _workers;
    private readonly PostgresAllocations _allocations;
    private readonly PostgresLeases _leases;
    private readonly PostgresPoolDirectory _directory;
    private int _disposed;

    /// <summary>
    /// A store over <see cref="PostgresWorkerStoreOptions.DataSource"/> (not owned) or a data
    /// source of its own built from <see cref="PostgresWorkerStoreOptions.ConnectionString"/>.
    /// Nothing is opened here; call <see cref="InitializeAsync"/> before use.
    /// </summary>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public PostgresWorkerStore(PostgresWorkerStoreOptions options, TimeProvider? timeProvider = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.EnsureValid();
        _ownsDataSource = options.DataSource is null;
        var dataSource = options.DataSource ?? BuildDataSource(options.ConnectionString!, StatementTimeout(options), options.CommandTimeout, options.LoggerFactory);
        _context = new PostgresStoreContext(dataSource, options, timeProvider ?? TimeProvider.System);
        _listener = new PostgresChangeFeed(dataSource, Channel, options, _context.Time, OnChange, Sql.Get("get_pool_ids"));
        _pools = new PostgresPools(_context);
        _workers = new PostgresWorkers(_context);
        _leases = new PostgresLeases(_context);
        _allocations = new PostgresAllocations(_context, _leases);
        _directory = new PostgresPoolDirectory(_context);
    }

    /// <summary>A store, initialized (migrated, listening); disposed again when that fails. For tests and tools without a host.</summary>
    public static async Task<PostgresWorkerStore> CreateAsync(PostgresWorkerStoreOptions options, TimeProvider? timeProvider = null, CancellationToken cancellationToken = default)
    {
        var store = new PostgresWorkerStore(options, timeProvider);
        try
        {
            await store.InitializeAsync(cancellationToken);
            return store;
        }
        catch
        {
            await store.DisposeAsync();
            throw;
        }
    }

    /// <inheritdoc cref="IPoolPlacementStore.InitializeAsync"/>
    /// <remarks>
    /// Applies the migrations (unless <see cref="PostgresWorkerStoreOptions.ApplyMigrations"/> is
    /// off) and opens the LISTEN connection (unless <see cref="PostgresWorkerStoreOptions.ListenForChanges"/>
    /// is off), waiting for it a bounded time so that a change made right after the first
    /// subscription is not missed; if it cannot connect in time it keeps retrying in the
    /// background and the store works without it.
    /// </remarks>
    public async Task InitializeAsync(CancellationToken cancellationToken = default)
    {
        var options = _context.Options;
        if (options.ApplyMigrations)
        {
            await PostgresMigrator.MigrateAsync(DataSource, options.Schema, cancellationToken);
        }

        if (options.ListenForChanges)
        {
            try
            {
                await WaitForListenerAsync(cancellationToken).WaitAsync(options.LockTimeout + TimeSpan.FromSeconds(3), cancellationToken);
            }
            catch (TimeoutException)
            {
                // Keep going: notifications start once the listener connects.
            }
        }
    }

    /// <summary>
    /// The data source a store builds for itself: Npgsql's defaults, except that a connection
    /// returned to the pool is not reset and the store's statements are prepared on each
    /// connection from their second use, unless the connection string says otherwise.
    /// </summary>
    /// <remarks>
    /// Npgsql resets a pooled connection with <c>DISCARD ALL</c> before its next use, and that
    /// drops every cached plan of the session, PL/pgSQL's included: each call of
    /// <c>allocate_batch</c> then planned all of its statements again. Measured at storm-90 with
    /// single allocations: one <c>DISCARD ALL</c> and one extra transaction per allocation, about
    /// 2 ms of database CPU each. The store leaves no session state to reset: lock timeouts are
    /// transaction-local (<c>set_config(..., true)</c>) and LISTEN has its own connection.
    /// <para>
    /// Prepared statements (Npgsql's automatic preparation, which sends the first Parse with the
    /// second use's Bind, so no round trip is added): each call then skips the parsing, analysis
    /// and planning of its statement and the description of its result. Issue 24: 8% of the
    /// database's CPU per allocation at storm-90 (batches of a few), 9% per allocate + release
    /// step at loopback, 23% for one allocation per call. The store's statement texts are fixed
    /// per schema, so each connection holds at most one prepared statement per script. A pooler
    /// in transaction mode that does not track prepared statements (PgBouncer before 1.21) needs
    /// <c>Max Auto Prepare=0</c>.
    /// </para>
    /// </remarks>
    internal static NpgsqlDataSource BuildDataSource(string connectionString, TimeSpan? statementTimeout = null, TimeSpan? connectionWait = null, Microsoft.Extensions.Logging.ILoggerFactory? loggerFactory = null)
    {
        var builder = new NpgsqlDataSourceBuilder(connectionString);
        var given = new System.Data.Common.DbConnectionStringBuilder { ConnectionString = connectionString };
        // A setting the string names, under its spelling with or without spaces.
        bool Given(string key) => given.ContainsKey(key) || given.ContainsKey(key.Replace(" ", "", StringComparison.Ordinal));
        if (!Given("No Reset On Close"))
        {
            builder.ConnectionStringBuilder.NoResetOnClose = true;
        }

        if (!Given("Max Auto Prepare"))
        {
            // Room for every script of the store (about thirty), so none pushes out a hot one.
            builder.ConnectionStringBuilder.MaxAutoPrepare = 64;
            if (!Given("Auto Prepare Min Usages"))
            {
                builder.ConnectionStringBuilder.AutoPrepareMinUsages = 2;
            }
        }

        if (connectionWait is { } wait && !Given("Timeout"))
        {
            // The wait for a pooled (or a new) connection: no longer than a command may take, so
            // it ends before the grain call and the HTTP request that wait for it (Npgsql's
            // default is 15 s; #7). Whole seconds, rounded up.
            builder.ConnectionStringBuilder.Timeout = Math.Max(1, (int)Math.Ceiling(wait.TotalSeconds));
        }

        var options = builder.ConnectionStringBuilder.Options ?? "";
        if (statementTimeout is { } timeout && !options.Contains("statement_timeout", StringComparison.Ordinal))
        {
            // Server-side, so a statement the client gave up on is cancelled (and rolled back) by
            // the server too, instead of committing after the caller was told it failed (#2).
            builder.ConnectionStringBuilder.Options = (options + " -c statement_timeout=" + (long)timeout.TotalMilliseconds).Trim();
        }

        if (loggerFactory is not null)
        {
            builder.UseLoggerFactory(loggerFactory);
        }

        return builder.Build();
    }

    /// <summary>
    /// The server's statement_timeout for the store's own data source: between the lock timeout
    /// and the command timeout (timeouts nest: lock &lt; statement &lt; command &lt; grain call &lt; HTTP).
    /// </summary>
    internal static TimeSpan StatementTimeout(PostgresWorkerStoreOptions options) =>
        options.LockTimeout + (options.CommandTimeout - options.LockTimeout) / 2;

    public string Name => PostgresStoreContext.StoreName;

    /// <summary>The data source's Maximum Pool Size; none when it multiplexes or does not pool.</summary>
    public int? ConnectionLimit
    {
        get
        {
            var settings = new NpgsqlConnectionStringBuilder(DataSource.ConnectionString);
            return settings.Pooling && !settings.Multiplexing ? settings.MaxPoolSize : null;
        }
    }

    /// <summary>The NOTIFY channel of this schema.</summary>
    internal string Channel => _context.Channel;

    internal NpgsqlDataSource DataSource => _context.DataSource;

    internal SqlScripts Sql => _context.Sql;

    /// <summary>The pool settings cache of this store (dropped entries on settings notifications, see <see cref="OnChange"/>).</summary>
    public PoolSettingsCache SettingsCache => _context.SettingsCache;

    // Pools (PostgresPools)

    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) =>
        _pools.UpsertPoolAsync(poolId, settings, cancellationToken);

    public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolAsync(poolId, cancellationToken);

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolStatisticsAsync(poolId, cancellationToken);

    public Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.RemovePoolIfEmptyAsync(poolId, cancellationToken);

    // Workers (PostgresWorkers)

    public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default) =>
        _workers.RegisterWorkersAsync(poolId, workers, cancellationToken);

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        _workers.DeregisterWorkerAsync(poolId, workerId, cancellationToken);

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) =>
        _workers.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) =>
        _workers.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        _workers.GetWorkerAsync(poolId, workerId, cancellationToken);

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) =>
        _workers.GetWorkersAsync(poolId, cancellationToken);

    // Allocations (PostgresAllocations)

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        AllocateAsync(poolId, requests, onCommitted: null, cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken = default) =>
        _allocations.AllocateAsync(poolId, requests, onCommitted, cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        _allocations.AllocateAsync(poolId, requests, fence, onCommitted, cancellationToken);

    // Leases (PostgresLeases)

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAsync(poolId, releases, cancellationToken);

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) =>
        _leases.ClaimPoolActivationAsync(poolId, cancellationToken);

    public Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAbandonedAsync(poolId, release, fence, cancellationToken);

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) =>
        _leases.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) =>
        _leases.GetAllocationAsync(poolId, allocationId, cancellationToken);

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) =>
        _leases.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken);

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default) =>
        _leases.ReapExpiredAsync(maxCount, cancellationToken);

    public Task<StoreReplication> ReadReplicationAsync(CancellationToken cancellationToken = default) =>
        PostgresReplication.ReadAsync(_context, cancellationToken);

    // Pool directory (PostgresPoolDirectory)

    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default) =>
        _directory.GetPlacementAsync(poolId, cancellationToken);

    public Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default) =>
        _directory.ReplacePlacementAsync(expected, replacement, cancellationToken);

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default) =>
        _directory.CountPoolsAsync(defaultDatabase, cancellationToken);

    // Change feed and lifetime

    public IDisposable Subscribe(Action<PoolChanged> handler) => _listener.Subscribe(handler);

    /// <summary>Waits until the LISTEN connection is established (for tests and start-up checks).</summary>
    internal Task WaitForListenerAsync(CancellationToken cancellationToken) => _listener.WaitUntilListeningAsync(cancellationToken);

    public async ValueTask DisposeAsync()
    {
        SettingsCache.Dispose();

        // The container may dispose this instance once per service it was registered as.
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _listener.DisposeAsync();
        if (_ownsDataSource)
        {
            await DataSource.DisposeAsync();
        }
    }

    private void OnChange(PoolChanged change)
    {
        if (change.Kind == PoolChangeKind.SettingsChanged)
        {
            _context.ForgetSettings(change.PoolId);
        }
    }
}
