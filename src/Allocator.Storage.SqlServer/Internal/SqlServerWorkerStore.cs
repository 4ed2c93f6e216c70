using System.Collections.Concurrent;
using System.Diagnostics;
using Allocator.Telemetry;
using System.Text;
using System.Text.Json;
using Allocator.Storage.Internal;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on SQL Server: the semantics of
/// the in-memory reference store, with each operation one embedded script and one round trip
/// (see the <c>Sql</c> folder). Registered with <c>AddAllocatorSqlServer</c>;
/// <see cref="InitializeAsync"/> (first connection, migrations) runs when the host starts.
/// </summary>
internal sealed class SqlServerWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolPlacementStore, IAllocationStatements, IAsyncDisposable
{
    private readonly string _connectionString;
    private readonly SqlServerWorkerStoreOptions _options;
    private readonly TimeProvider _time;
    private readonly SqlServerChangeFeed _changes;
    private readonly SqlServerRetryPolicy _retry;
    private readonly AllocationStages _stages;

    public SqlServerWorkerStore(SqlServerWorkerStoreOptions options, TimeProvider? timeProvider = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.EnsureValid();
        _options = options;
        _connectionString = BuildConnectionString(options);
        _time = timeProvider ?? TimeProvider.System;
        Commands = new SqlServerCommandFactory(new SqlScripts(options.Schema, options.LockTimeout, StatementTimeout(options)), options.CommandTimeout, options.HistoryRetention, options.HistoryPurgeBatch);
        _retry = new SqlServerRetryPolicy(OpenAsync, Commands, options, _time);
        _stages = new AllocationStages(this, options, _time, _retry.Jitter);
        _changes = new SqlServerChangeFeed(this, options, _time);
        SettingsCache = new PoolSettingsCache(ReadSettingsAsync, changes: null, options.SettingsCacheDuration, _time);
    }

    public string Name => "sqlserver";

    /// <summary>The connection string's Max Pool Size; none when it does not pool.</summary>
    public int? ConnectionLimit
    {
        get
        {
            var settings = new SqlConnectionStringBuilder(_connectionString);
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
    public PoolSettingsCache SettingsCache { get; }

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
        var builder = new SqlConnectionStringBuilder(_connectionString);
        var startup = new SqlConnectionStringBuilder(builder.ConnectionString)
        {
            ConnectTimeout = Math.Max(1, (int)_options.StartupConnectTimeout.TotalSeconds),
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
                await SqlServerMigrator.MigrateAsync(connection, Commands, _options.Schema, _options.CommandTimeout / 2, cancellationToken);
            }
            catch (SqlException ex)
            {
                throw new InvalidOperationException($"Migrating the SQL Server schema [{_options.Schema}] failed (error {ex.Number}): {ex.Message}", ex);
            }
        }
    }

    internal SqlServerCommandFactory Commands { get; }

    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        var created = await RunAsync(poolId, () => Commands.UpsertPool(poolId, settings), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return reader.GetBoolean(0);
        }, cancellationToken);
        SettingsCache.Invalidate(poolId);
        if (!created)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return new PoolUpsertResult(new Pool(poolId, settings), created);
    }

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await ReadSettingsAsync(poolId, cancellationToken) is { } settings ? new Pool(poolId, settings) : null;
    }

    /// <summary>One fresh read of a pool's settings (the cache's loader, and <see cref="GetPoolAsync"/>).</summary>
    private Task<PoolSettings?> ReadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        RunAsync(poolId, () => Commands.GetPool(poolId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadSettings(reader) : null, cancellationToken);

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return RunAsync(poolId, () => Commands.GetPoolStatistics(poolId), async (reader, ct) =>
        {
            if (!await reader.ReadAsync(ct))
            {
                throw AllocatorException.PoolNotFound(poolId);
            }

            return new PoolStatistics
            {
                PoolId = poolId,
                Settings = SqlServerRowReaders.ReadSettings(reader),
                Workers = reader.GetInt32(reader.GetOrdinal("workers")),
                AvailableWorkers = reader.GetInt32(reader.GetOrdinal("available_workers")),
                Capacity = reader.GetInt64(reader.GetOrdinal("capacity")),
                Load = reader.GetInt64(reader.GetOrdinal("load_slots")),
                FreeSlots = reader.GetInt64(reader.GetOrdinal("free_slots")),
                ActiveAllocations = reader.GetInt64(reader.GetOrdinal("active_allocations")),
                MinLoad = reader.GetInt32(reader.GetOrdinal("min_load")),
                MaxLoad = reader.GetInt32(reader.GetOrdinal("max_load")),
                MinScore = reader.GetInt64(reader.GetOrdinal("min_score")),
                MaxScore = reader.GetInt64(reader.GetOrdinal("max_score")),
            };
        }, cancellationToken);
    }

    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRegistrations(workers);
        var outcomes = new RegistrationOutcome[workers.Count];
        var anyChanged = false;

        // Chunks in worker id order, each its own short transaction: bounded locks per statement
        // (no escalation to a table lock that READPAST cannot pass) and rows always locked in
        // (pool, worker id) order, so concurrent batches queue rather than deadlock.
        foreach (var chunk in RegistrationBatches.Split(workers))
        {
            var json = RegistrationJson(chunk);
            await RunAsync(poolId, () => Commands.RegisterWorkers(poolId, json), async (reader, ct) =>
            {
                while (await reader.ReadAsync(ct))
                {
                    var index = reader.GetInt32(reader.GetOrdinal("i"));
                    var status = reader.GetInt32(reader.GetOrdinal("status")) switch
                    {
                        0 => RegistrationStatus.Created,
                        1 => RegistrationStatus.Updated,
                        _ => RegistrationStatus.CapacityBelowLoad,
                    };
                    anyChanged |= status != RegistrationStatus.CapacityBelowLoad;
                    var worker = SqlServerRowReaders.ReadWorker(reader);
                    outcomes[index] = new RegistrationOutcome(worker.WorkerId, status, worker);
                }

                return true;
            }, cancellationToken);
        }

        if (anyChanged)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return outcomes;
    }

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        return RunAsync(poolId, () => Commands.DeregisterWorker(poolId, workerId), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return new DeregistrationResult(reader.GetBoolean(0), reader.GetInt32(1));
        }, cancellationToken);
    }

    public async Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        var status = await RunAsync(poolId, () => Commands.SetWorkerState(poolId, workerId, state), SqlServerRowReaders.ReadStatusAsync, cancellationToken);
        if (status == 0 && state == WorkerState.Available)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return status == 0 ? WorkerUpdateStatus.Ok : WorkerUpdateStatus.NotFound;
    }

    public async Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        var status = await RunAsync(poolId, () => Commands.ReportLoad(poolId, workerId, epoch, loadIndex), SqlServerRowReaders.ReadStatusAsync, cancellationToken);
        if (status == 0)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return status switch
        {
            0 => WorkerUpdateStatus.Ok,
            2 => WorkerUpdateStatus.StaleEpoch,
            _ => WorkerUpdateStatus.NotFound,
        };
    }

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        return RunAsync(poolId, () => Commands.GetWorker(poolId, workerId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadWorker(reader) : null, cancellationToken);
    }

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return RunAsync<IReadOnlyList<Worker>>(poolId, () => Commands.GetWorkers(poolId), async (reader, ct) =>
        {
            var workers = new List<Worker>();
            while (await reader.ReadAsync(ct))
            {
                workers.Add(SqlServerRowReaders.ReadWorker(reader));
            }

            return workers;
        }, cancellationToken);
    }

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        AllocateAsync(poolId, requests, onCommitted: null, cancellationToken);

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);

        // Settings from the cache (one read per pool and period); a stale strategy is caught by
        // the script (50412) and the call follows the other way with fresh settings. An unknown
        // pool is the script's 50404.
        var settings = await SettingsCache.GetAsync(poolId, cancellationToken);
        var strict = settings?.Strategy == AllocationStrategy.Strict;

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.allocate");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, Name);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, _options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(strict ? AllocationStrategy.Strict : AllocationStrategy.SkipLocked));
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, requests.Count);

        IReadOnlyList<AllocationOutcome> outcomes;
        try
        {
            outcomes = await _stages.RunAsync(poolId, strict, requests, onCommitted, () => SettingsCache.Invalidate(poolId), cancellationToken);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }

        if (activity is not null && requests.Count == 1)
        {
            var single = outcomes[0];
            activity.SetTag(AllocatorTelemetry.Tags.Outcome, AllocatorTelemetry.Outcomes.Of(single.Status));
            activity.SetTag(AllocatorTelemetry.Tags.Worker, single.Allocation?.WorkerId);
            activity.SetTag(AllocatorTelemetry.Tags.Units, requests[0].Units);
            activity.SetTag(AllocatorTelemetry.Tags.Rank, single.Decision.Rank);
            activity.SetTag(AllocatorTelemetry.Tags.ExcessScore, single.Decision.ExcessScore);
            activity.SetTag(AllocatorTelemetry.Tags.RowsSkipped, single.Decision.RowsSkipped);
            activity.SetTag(AllocatorTelemetry.Tags.BlockingFallback, single.Decision.BlockingFallback);
        }

        activity?.SetTag(AllocatorTelemetry.Tags.Retries, outcomes.Count == 0 ? 0 : outcomes.Max(o => o.Decision.Retries));
        return outcomes;
    }

    Task<IReadOnlyList<AllocationRow>> IAllocationStatements.SkipLockedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, IReadOnlyList<int> indexes, CancellationToken cancellationToken)
    {
        var json = AllocationJson(requests, indexes);
        return RunAsync(poolId, () => Commands.Allocate(poolId, json), SqlServerRowReaders.ReadAllocationRowsAsync, cancellationToken);
    }

    async Task<AllocationRow> IAllocationStatements.BlockingAsync(string poolId, AllocationRequest request, bool fallback, CancellationToken cancellationToken)
    {
        // One id for every re-run of this statement: a re-run after a deadlock is the same attempt.
        var allocationId = Guid.CreateVersion7(_time.GetUtcNow());
        var rows = await RunAsync(poolId, () => Commands.AllocateBlocking(poolId, allocationId, request, fallback), SqlServerRowReaders.ReadAllocationRowsAsync, cancellationToken);
        return rows.Count == 1 ? rows[0] : throw new InvalidOperationException($"allocate_blocking answered {rows.Count} rows for one request.");
    }

    async Task<int> IAllocationStatements.ReapPoolAsync(string poolId, CancellationToken cancellationToken) =>
        (await ReapCoreAsync(1000, poolId, cancellationToken)).Count;

    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var result = await RunAsync(poolId, () => Commands.Release(poolId, allocationId, epoch), SqlServerRowReaders.ReadLeaseResultAsync, cancellationToken);
        if (result.Status == LeaseStatus.Ok)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return result;
    }

    public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var json = ReleaseJson(releases);
        var results = await RunAsync<IReadOnlyList<LeaseResult>>(poolId, () => Commands.ReleaseBatch(poolId, json), async (reader, ct) =>
        {
            var answered = new LeaseResult?[releases.Count];
            while (await reader.ReadAsync(ct))
            {
                var status = SqlServerRowReaders.ToLeaseStatus(reader.GetByte(reader.GetOrdinal("status")));
                answered[reader.GetInt32(reader.GetOrdinal("i"))] = new LeaseResult(status, status == LeaseStatus.NotFound ? null : SqlServerRowReaders.ReadAllocation(reader));
            }

            return Array.ConvertAll(answered, r => r ?? throw new InvalidOperationException($"release_batch answered fewer rows than the {releases.Count} releases."));
        }, cancellationToken);

        if (results.Any(r => r.Status == LeaseStatus.Ok))
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return results;
    }

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default)
    {
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        AllocatorValidation.EnsurePoolId(poolId);
        return RunAsync(poolId, () => Commands.Renew(poolId, allocationId, epoch, lease, owner), SqlServerRowReaders.ReadLeaseResultAsync, cancellationToken);
    }

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return RunAsync(poolId, () => Commands.GetAllocation(poolId, allocationId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? SqlServerRowReaders.ReadAllocation(reader) : null, cancellationToken);
    }

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        return ReapCoreAsync(maxCount, poolId: null, cancellationToken);
    }

    private async Task<IReadOnlyList<Allocation>> ReapCoreAsync(int maxCount, string? poolId, CancellationToken cancellationToken)
    {
        var reaped = await RunAsync<IReadOnlyList<Allocation>>(poolId, () => Commands.ReapExpired(maxCount, poolId), async (reader, ct) =>
        {
            var ended = new List<Allocation>();
            while (await reader.ReadAsync(ct))
            {
                ended.Add(SqlServerRowReaders.ReadAllocation(reader));
            }

            return ended;
        }, cancellationToken);

        foreach (var changed in reaped.Select(a => a.PoolId).Distinct(StringComparer.Ordinal))
        {
            _changes.Raise(new PoolChanged(changed, PoolChangeKind.CapacityAvailable));
        }

        return reaped;
    }

    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return RunAsync(poolId, () => Commands.DirectoryGet(poolId), async (reader, ct) =>
            await reader.ReadAsync(ct) ? new PoolPlacement(poolId, reader.GetString(0), reader.IsDBNull(1) ? null : reader.GetString(1)) : null, cancellationToken);
    }

    public async Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(replacement);
        AllocatorValidation.EnsurePoolId(replacement.PoolId);
        if (expected is not null && !string.Equals(expected.PoolId, replacement.PoolId, StringComparison.Ordinal))
        {
            throw new ArgumentException("The expected and the new entry must be of one pool.", nameof(expected));
        }

        var replaced = await RunAsync(replacement.PoolId, () => Commands.DirectoryReplace(expected, replacement), async (reader, ct) =>
        {
            await reader.ReadAsync(ct);
            return reader.GetBoolean(0);
        }, cancellationToken);
        if (replaced)
        {
            // This instance at once; the others when their poll sees the entry's version.
            _changes.Raise(new PoolChanged(replacement.PoolId, PoolChangeKind.SettingsChanged));
        }

        return replaced;
    }

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(defaultDatabase);
        return RunAsync<IReadOnlyDictionary<string, long>>(null, () => Commands.DirectoryCount(defaultDatabase), async (reader, ct) =>
        {
            var counts = new Dictionary<string, long>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                counts[reader.GetString(0)] = counts.GetValueOrDefault(reader.GetString(0)) + reader.GetInt64(1);
            }

            return counts;
        }, cancellationToken);
    }

    public async Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        PoolRemoval removal;
        try
        {
            removal = await RunAsync(poolId, () => Commands.RemovePool(poolId), async (reader, ct) =>
            {
                await reader.ReadAsync(ct);
                return new PoolRemoval(reader.GetBoolean(0), reader.GetBoolean(1), reader.GetInt32(2), reader.GetInt64(3));
            }, cancellationToken);
        }
        catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.NotFound)
        {
            // 547 on the pool row's DELETE: a worker was registered after the counts (remove_pool.sql); all rolled back.
            return new PoolRemoval(Found: true, Removed: false, Workers: 1, ActiveAllocations: 0);
        }

        if (removal.Removed)
        {
            _changes.Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return removal;
    }

    public IDisposable Subscribe(Action<PoolChanged> handler) => _changes.Subscribe(handler);

    public ValueTask DisposeAsync()
    {
        SettingsCache.Dispose();
        return _changes.DisposeAsync();
    }

    /// <summary>Opens a connection, one attempt (the retry policy's opener; the conformance tests' migrator check).</summary>
    internal async Task<SqlConnection> OpenAsync(CancellationToken cancellationToken)
    {
        var connection = new SqlConnection(_connectionString);
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

    internal async Task<IReadOnlyList<(string PoolId, long Capacity, long Settings)>> ReadPoolChangesAsync(CancellationToken cancellationToken) =>
        await RunAsync<IReadOnlyList<(string, long, long)>>(null, Commands.GetPoolChanges, async (reader, ct) =>
        {
            var rows = new List<(string, long, long)>();
            while (await reader.ReadAsync(ct))
            {
                rows.Add((reader.GetString(0), reader.GetInt64(1), reader.GetInt64(2)));
            }

            return rows;
        }, cancellationToken);

    internal string AllocationJson(IReadOnlyList<AllocationRequest> requests, IEnumerable<int> indexes)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            foreach (var i in indexes)
            {
                var request = requests[i];
                json.WriteStartObject();
                json.WriteNumber("i", i);
                json.WriteString("a", Guid.CreateVersion7(_time.GetUtcNow()));
                json.WriteString("k", StoredSessionKey.Of(request)); // the key is its owner's (issue 22)
                json.WriteNumber("u", request.Units);
                if (request.RequiredTags is { Count: > 0 } tags)
                {
                    json.WriteStartArray("t");
                    foreach (var tag in tags)
                    {
                        json.WriteStringValue(tag);
                    }

                    json.WriteEndArray();
                }
                else
                {
                    json.WriteNull("t");
                }

                WriteMilliseconds(json, "l", request.Lease);
                WriteMilliseconds(json, "f", request.FallbackLease);

                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    private static void WriteMilliseconds(Utf8JsonWriter json, string name, TimeSpan? value)
    {
        if (SqlServerCommandFactory.Milliseconds(value) is { } ms)
        {
            json.WriteNumber(name, ms);
        }
        else
        {
            json.WriteNull(name);
        }
    }

    internal static string ReleaseJson(IReadOnlyList<LeaseRelease> releases)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            for (var i = 0; i < releases.Count; i++)
            {
                json.WriteStartObject();
                json.WriteNumber("i", i);
                json.WriteString("a", releases[i].AllocationId);
                json.WriteNumber("e", releases[i].Epoch);
                if (releases[i].Owner is { } owner)
                {
                    json.WriteString("o", owner);
                }
                else
                {
                    json.WriteNull("o");
                }
                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    internal static string RegistrationJson(IEnumerable<(int Index, WorkerRegistration Registration)> chunk)
    {
        using var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer))
        {
            json.WriteStartArray();
            foreach (var (index, registration) in chunk)
            {
                json.WriteStartObject();
                json.WriteNumber("i", index);
                json.WriteString("w", registration.WorkerId);
                json.WriteString("a", registration.Address ?? "");
                json.WriteNumber("c", registration.Capacity);
                json.WriteStartArray("t");
                foreach (var tag in NormalizeTags(registration.Tags))
                {
                    json.WriteStringValue(tag);
                }

                json.WriteEndArray();
                json.WriteEndObject();
            }

            json.WriteEndArray();
        }

        return Encoding.UTF8.GetString(buffer.ToArray());
    }

    private static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];

    private Task<T> RunAsync<T>(string? poolId, Func<SqlCommand> build, Func<SqlDataReader, CancellationToken, Task<T>> read, CancellationToken cancellationToken) =>
        _retry.RunAsync(poolId, build, read, cancellationToken);

}

/// <summary>The pool's strategy differs from the cached one; the allocation re-runs the other way.</summary>
internal sealed class StrategyChangedException(Exception inner) : Exception("The pool's allocation strategy changed.", inner);
