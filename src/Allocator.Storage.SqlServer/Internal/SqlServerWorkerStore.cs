using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on SQL Server: the semantics of
/// the in-memory reference store, with each operation one embedded script and one round trip
/// (see the <c>Sql</c> folder). Registered with <c>AddAllocatorSqlServer</c>;
/// <see cref="InitializeAsync"/> (first connection, migrations) runs when the host starts.
/// </summary>
/// <remarks>
/// The operations live in one class per family, as in the other stores (docs/architecture.md,
/// "Where each operation lives"); they share the connection string, scripts, retry policy, change
/// feed and settings cache through <see cref="SqlServerStoreContext"/>.
/// </remarks>
internal sealed class SqlServerWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolPlacementStore, IAsyncDisposable
{
    private readonly SqlServerStoreContext _context;
    private readonly SqlServerPools _pools;
    private readonly SqlServerWorkers _workers;
    private readonly SqlServerAllocations _allocations;
    private readonly SqlServerLeases _leases;
    private readonly SqlServerPoolDirectory _directory;

    public SqlServerWorkerStore(SqlServerWorkerStoreOptions options, TimeProvider? timeProvider = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.EnsureValid();
        var commands = new SqlServerCommandFactory(new SqlScripts(options.Schema, options.LockTimeout, StatementTimeout(options)), options.CommandTimeout, options.HistoryRetention, options.HistoryPurgeBatch);
        _context = new SqlServerStoreContext(BuildConnectionString(options), commands, options, timeProvider ?? TimeProvider.System);
        _pools = new SqlServerPools(_context);
        _workers = new SqlServerWorkers(_context);
        _leases = new SqlServerLeases(_context);
        _allocations = new SqlServerAllocations(_context, _leases);
        _directory = new SqlServerPoolDirectory(_context);
    }

    public string Name => SqlServerStoreContext.StoreName;

    /// <summary>The connection string's Max Pool Size; none when it does not pool.</summary>
    public int? ConnectionLimit
    {
        get
        {
            var settings = new SqlConnectionStringBuilder(_context.ConnectionString);
            return settings.Pooling ? settings.MaxPoolSize : null;
        }
    }

    /// <summary>
    /// The connection string the store opens with: the configured one, with two defaults changed
    /// unless it sets them itself. <c>Pool Blocking Period=NeverBlock</c>: SqlClient's default
    /// (Auto) makes every open in the 5 s to 1 min after a failed one fail at once with the cached
    /// error, without trying the server, so neither a retried open nor the next request could
    /// reach a server that came back. <c>Connect Timeout</c> = the command timeout (whole seconds,
    /// rounded up) instead of 15 s: it bounds both the login and the wait for a pooled connection,
    /// which must end before the caller gives up (#7's rule on PostgreSQL).
    /// </summary>
    internal static string BuildConnectionString(SqlServerWorkerStoreOptions options)
    {
        var builder = new SqlConnectionStringBuilder(options.ConnectionString);
        if (!builder.ShouldSerialize("Pool Blocking Period"))
        {
            builder.PoolBlockingPeriod = PoolBlockingPeriod.NeverBlock;
        }

        if (!builder.ShouldSerialize("Connect Timeout"))
        {
            builder.ConnectTimeout = Math.Max(1, (int)Math.Ceiling(options.CommandTimeout.TotalSeconds));
        }

        return builder.ConnectionString;
    }

    /// <summary>
    /// Every script's own time budget, the stand-in for PostgreSQL's statement_timeout: between the
    /// lock timeout and the command timeout (timeouts nest: lock &lt; statement &lt; command &lt;
    /// grain call &lt; HTTP), the same value the PostgreSQL store gives its statement_timeout.
    /// </summary>
    internal static TimeSpan StatementTimeout(SqlServerWorkerStoreOptions options) =>
        options.LockTimeout + (options.CommandTimeout - options.LockTimeout) / 2;

    /// <summary>The pool settings cache of this store; the change feed drops entries on settings changes.</summary>
    public PoolSettingsCache SettingsCache => _context.SettingsCache;

    /// <summary>A store, initialized (connected, migrated). For tests and tools without a host.</summary>
    public static async Task<SqlServerWorkerStore> CreateAsync(SqlServerWorkerStoreOptions options, TimeProvider? timeProvider = null, CancellationToken cancellationToken = default)
    {
        var store = new SqlServerWorkerStore(options, timeProvider);
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

    /// <summary>
    /// Opens a first connection with a short connect timeout
    /// (<see cref="SqlServerWorkerStoreOptions.StartupConnectTimeout"/>) so that an unreachable
    /// server fails start-up fast with a message naming <c>ConnectionStrings:Allocator</c> (never
    /// the credentials), then applies the embedded migrations under an application lock.
    /// </summary>
    /// <exception cref="InvalidOperationException">The server cannot be reached or the migration failed.</exception>
    public async Task InitializeAsync(CancellationToken cancellationToken = default)
    {
        var options = _context.Options;
        var builder = new SqlConnectionStringBuilder(_context.ConnectionString);
        var startup = new SqlConnectionStringBuilder(builder.ConnectionString)
        {
            ConnectTimeout = Math.Max(1, (int)options.StartupConnectTimeout.TotalSeconds),
            Pooling = false,
        };

        SqlConnection connection;
        try
        {
            connection = new SqlConnection(startup.ConnectionString);
            await connection.OpenAsync(cancellationToken);
        }
        catch (Exception ex) when (ex is NotSupportedException or System.Globalization.CultureNotFoundException)
        {
            throw new InvalidOperationException(
                "Microsoft.Data.SqlClient cannot open a connection in globalization-invariant mode: set " +
                "<InvariantGlobalization>false</InvariantGlobalization> in the executable that uses the SQL Server store " +
                "(see docs/sqlserver.md).", ex);
        }
        catch (Exception ex) when (ex is SqlException or InvalidOperationException)
        {
            // Names the setting and the target, never the credentials.
            throw new InvalidOperationException(
                $"Cannot connect to SQL Server '{builder.DataSource}' (database '{builder.InitialCatalog}') configured by " +
                $"{SqlServerWorkerStoreOptions.ConnectionStringSetting}: {ex.Message}", ex);
        }

        await using (connection)
        {
            try
            {
                await SqlServerMigrator.MigrateAsync(connection, Commands, options.Schema, options.CommandTimeout / 2, cancellationToken);
            }
            catch (SqlException ex)
            {
                throw new InvalidOperationException($"Migrating the SQL Server schema [{options.Schema}] failed (error {ex.Number}): {ex.Message}", ex);
            }
        }
    }

    internal SqlServerCommandFactory Commands => _context.Commands;

    // Pools (SqlServerPools)

    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) =>
        _pools.UpsertPoolAsync(poolId, settings, cancellationToken);

    public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolAsync(poolId, cancellationToken);

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolStatisticsAsync(poolId, cancellationToken);

    public Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.RemovePoolIfEmptyAsync(poolId, cancellationToken);

    // Workers (SqlServerWorkers)

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

    // Allocations (SqlServerAllocations)

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        AllocateAsync(poolId, requests, onCommitted: null, cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken = default) =>
        _allocations.AllocateAsync(poolId, requests, onCommitted, cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        _allocations.AllocateAsync(poolId, requests, fence, onCommitted, cancellationToken);

    // Leases (SqlServerLeases)

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

    // Pool directory (SqlServerPoolDirectory)

    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default) =>
        _directory.GetPlacementAsync(poolId, cancellationToken);

    public Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default) =>
        _directory.ReplacePlacementAsync(expected, replacement, cancellationToken);

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default) =>
        _directory.CountPoolsAsync(defaultDatabase, cancellationToken);

    // Change feed and lifetime

    public IDisposable Subscribe(Action<PoolChanged> handler) => _context.Changes.Subscribe(handler);

    public ValueTask DisposeAsync()
    {
        SettingsCache.Dispose();
        return _context.Changes.DisposeAsync();
    }

    /// <summary>Opens a connection, one attempt (the retry policy's opener; the conformance tests' migrator check).</summary>
    internal Task<SqlConnection> OpenAsync(CancellationToken cancellationToken) => _context.OpenAsync(cancellationToken);
}
