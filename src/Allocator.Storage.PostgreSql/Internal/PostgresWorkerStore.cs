using System.Diagnostics;
using System.Text.Json;
using Allocator.Storage.Internal;
using Allocator.Telemetry;
using Npgsql;
using NpgsqlTypes;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/> on PostgreSQL. Every operation is
/// one autocommit statement (one round trip); retries always run as fresh statements, never
/// inside a failed transaction. Registered with
/// <see cref="Microsoft.Extensions.DependencyInjection.PostgresServiceCollectionExtensions.AddAllocatorPostgres(Microsoft.Extensions.DependencyInjection.IServiceCollection, string, Action{PostgresWorkerStoreOptions}?)"/>;
/// <see cref="InitializeAsync"/> (migrations, the LISTEN connection) runs when the host starts.
/// </summary>
internal sealed class PostgresWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolPlacementStore, IAsyncDisposable
{
    private readonly NpgsqlDataSource _dataSource;
    private readonly bool _ownsDataSource;
    private readonly PostgresWorkerStoreOptions _options;
    private readonly SqlScripts _sql;
    private readonly TimeProvider _time;
    private readonly string _lockTimeoutSetting;
    private readonly int _commandTimeoutSeconds;
    private readonly long _retentionMs;
    private readonly PostgresRetryPolicy _retry;
    private readonly PostgresChangeFeed _listener;
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
        _dataSource = options.DataSource ?? BuildDataSource(options.ConnectionString!, StatementTimeout(options), options.CommandTimeout, options.LoggerFactory);
        _options = options;
        _sql = new SqlScripts(options.Schema);
        _time = timeProvider ?? TimeProvider.System;
        _lockTimeoutSetting = $"{Math.Max(1, (long)options.LockTimeout.TotalMilliseconds)}ms";
        _commandTimeoutSeconds = Math.Max(1, (int)Math.Ceiling(options.CommandTimeout.TotalSeconds));
        _retentionMs = (long)options.HistoryRetention.TotalMilliseconds;
        Channel = options.Schema + ".pool_changes";
        _listener = new PostgresChangeFeed(_dataSource, Channel, options, _time, OnChange, _sql.Get("get_pool_ids"));
        _retry = new PostgresRetryPolicy(options, _time, ForgetSettings);
        SettingsCache = new PoolSettingsCache(ReadSettingsAsync, changes: null, options.SettingsCacheDuration, _time);
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
        if (_options.ApplyMigrations)
        {
            await PostgresMigrator.MigrateAsync(_dataSource, _options.Schema, cancellationToken);
        }

        if (_options.ListenForChanges)
        {
            try
            {
                await WaitForListenerAsync(cancellationToken).WaitAsync(_options.LockTimeout + TimeSpan.FromSeconds(3), cancellationToken);
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

    public string Name => "postgres";

    /// <summary>The data source's Maximum Pool Size; none when it multiplexes or does not pool.</summary>
    public int? ConnectionLimit
    {
        get
        {
            var settings = new NpgsqlConnectionStringBuilder(_dataSource.ConnectionString);
            return settings.Pooling && !settings.Multiplexing ? settings.MaxPoolSize : null;
        }
    }

    /// <summary>The NOTIFY channel of this schema.</summary>
    internal string Channel { get; }

    internal NpgsqlDataSource DataSource => _dataSource;

    internal SqlScripts Sql => _sql;

    /// <summary>The pool settings cache of this store (dropped entries on settings notifications, see <see cref="OnChange"/>).</summary>
    public PoolSettingsCache SettingsCache { get; }

    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        var created = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("upsert_pool",
                poolId, settings.Strategy.ToName(), Ms(settings.DefaultLease), (long)settings.MaxWait.TotalMilliseconds,
                Ms(settings.HeartbeatTimeout), settings.SerializeRegistrations, Channel);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            return reader.GetBoolean(0);
        }, duplicateKeyIsTransient: true, cancellationToken);
        ForgetSettings(poolId);
        return new PoolUpsertResult(new Pool(poolId, settings), created);
    }

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var settings = await ReadSettingsAsync(poolId, cancellationToken);
        return settings is null ? null : new Pool(poolId, settings);
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return _retry.RunAsync(async ct =>
        {
            await using var command = Command("get_pool_statistics", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            if (!await reader.ReadAsync(ct))
            {
                throw AllocatorException.PoolNotFound(poolId);
            }

            return new PoolStatistics
            {
                PoolId = poolId,
                Settings = PostgresRowReaders.ReadSettings(reader, 0),
                Workers = reader.GetInt32(5),
                AvailableWorkers = reader.GetInt32(6),
                Capacity = reader.GetInt64(7),
                Load = reader.GetInt64(8),
                FreeSlots = reader.GetInt64(9),
                MinLoad = reader.GetInt32(10),
                MaxLoad = reader.GetInt32(11),
                MinScore = reader.GetInt64(12),
                MaxScore = reader.GetInt64(13),
                ActiveAllocations = reader.GetInt64(14),
            };
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRegistrations(workers);
        var settings = await LoadSettingsAsync(poolId, cancellationToken) ?? throw AllocatorException.PoolNotFound(poolId);

        // Sorted input: rows are locked and inserted in (pool, worker id) order, so concurrent
        // overlapping batches wait for each other instead of deadlocking.
        var sorted = workers.OrderBy(w => w.WorkerId, StringComparer.Ordinal).ToArray();
        var ids = sorted.Select(w => w.WorkerId).ToArray();
        var addresses = sorted.Select(w => w.Address ?? string.Empty).ToArray();
        var capacities = sorted.Select(w => w.Capacity).ToArray();
        var tags = JsonSerializer.Serialize(sorted.Select(w => NormalizeTags(w.Tags)).ToArray());

        var byId = await _retry.RunAsync(async ct =>
        {
            await using var batch = _dataSource.CreateBatch();
            if (settings.SerializeRegistrations)
            {
                // One batch at a time per pool, across instances: a transaction-scoped advisory
                // lock, released by the batch's implicit transaction when it commits.
                batch.BatchCommands.Add(BatchCommand("serialize_registrations", Channel, poolId));
            }

            batch.BatchCommands.Add(BatchCommand("register_workers", poolId, ids, addresses, capacities, Jsonb(tags)));
            // Same round trip, same implicit transaction: delivered only if the registration commits.
            batch.BatchCommands.Add(new NpgsqlBatchCommand("SELECT pg_notify($1, $2)")
            {
                Parameters = { new NpgsqlParameter { Value = Channel }, new NpgsqlParameter { Value = poolId + ":c" } },
            });
            batch.Timeout = _commandTimeoutSeconds;
            await using var reader = await batch.ExecuteReaderAsync(ct);
            if (settings.SerializeRegistrations)
            {
                await reader.NextResultAsync(ct);
            }

            var result = new Dictionary<string, RegistrationOutcome>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                var status = reader.GetString(0) switch
                {
                    "created" => RegistrationStatus.Created,
                    "updated" => RegistrationStatus.Updated,
                    _ => RegistrationStatus.CapacityBelowLoad,
                };
                var worker = PostgresRowReaders.ReadWorker(reader, 1, poolId);
                result[worker.WorkerId] = new RegistrationOutcome(worker.WorkerId, status, worker);
            }

            return result;
        }, duplicateKeyIsTransient: true, cancellationToken, poolId);

        var outcomes = new RegistrationOutcome[workers.Count];
        for (var i = 0; i < workers.Count; i++)
        {
            if (!byId.TryGetValue(workers[i].WorkerId, out var outcome))
            {
                // Lost an insert race to a row whose load now exceeds the new capacity (see register_workers.sql).
                var current = await GetWorkerAsync(poolId, workers[i].WorkerId, cancellationToken)
                    ?? throw new AllocatorException(AllocatorErrorKind.Conflict, $"Worker '{workers[i].WorkerId}' was deregistered while registering.");
                outcome = new RegistrationOutcome(current.WorkerId, RegistrationStatus.CapacityBelowLoad, current);
            }

            outcomes[i] = outcome;
        }

        return outcomes;
    }

    public async Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        var (found, ended) = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("deregister_worker", poolId, workerId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            return (reader.GetInt32(0), reader.GetInt32(1));
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (found == 0)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
        }

        return new DeregistrationResult(found > 0, ended);
    }

    public async Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        var found = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("set_worker_state", poolId, workerId, state.ToName(), Channel);
            return Convert.ToInt32(await command.ExecuteScalarAsync(ct), System.Globalization.CultureInfo.InvariantCulture);
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (found == 0)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
            return WorkerUpdateStatus.NotFound;
        }

        return WorkerUpdateStatus.Ok;
    }

    public async Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        var (current, changed) = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("report_load", poolId, workerId, epoch, Nullable(loadIndex, NpgsqlDbType.Integer), Channel);
            await using var reader = await command.ExecuteReaderAsync(ct);
            await reader.ReadAsync(ct);
            return (reader.IsDBNull(0) ? (long?)null : reader.GetInt64(0), reader.GetInt32(1));
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (current is null)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
            return WorkerUpdateStatus.NotFound;
        }

        return changed > 0 ? WorkerUpdateStatus.Ok : WorkerUpdateStatus.StaleEpoch;
    }

    public async Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureWorkerId(workerId);
        var worker = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("get_worker", poolId, workerId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? PostgresRowReaders.ReadWorker(reader, 0, poolId) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (worker is null)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
        }

        return worker;
    }

    public async Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var workers = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("get_workers", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            var list = new List<Worker>();
            while (await reader.ReadAsync(ct))
            {
                list.Add(PostgresRowReaders.ReadWorker(reader, 0, poolId));
            }

            return list;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (workers.Count == 0)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
        }

        return workers;
    }

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        AllocateAsync(poolId, requests, onCommitted: null, cancellationToken);

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);
        var settings = await LoadSettingsAsync(poolId, cancellationToken) ?? throw AllocatorException.PoolNotFound(poolId);

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.allocate");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, Name);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, _options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(settings.Strategy));
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, requests.Count);

        var batch = new AllocationBatch(requests, onCommitted);
        try
        {
            await RunStagesAsync(poolId, settings.Strategy, batch, [.. Enumerable.Range(0, requests.Count)], cancellationToken);

            // An expired lease holds no capacity, whether or not the reaper has run (#5): when a
            // request found none, end this pool's expired leases and try those requests once more.
            var full = batch.Undecided(AllocationStatus.NoCapacity);
            if (full.Count > 0 && await ReapAsync(1000, poolId, cancellationToken) > 0)
            {
                batch.Reopen(full);
                await RunStagesAsync(poolId, settings.Strategy, batch, full, cancellationToken);
            }
        }
        catch (Exception ex) when (batch.AnyCommitted)
        {
            // Committed work is reported, never thrown away (#1): the requests this failure left
            // undecided answer Unavailable; their outcome is unknown unless the error says the
            // statement rolled back.
            var unknown = ex is not AllocatorException { OutcomeUnknown: false };
            activity?.AddEvent(new ActivityEvent("allocator.batch_failed_after_commit", tags: new ActivityTagsCollection { ["exception.type"] = ex.GetType().Name }));
            batch.DecideRest(AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, batch.Retries), unknown));
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }

        var outcomes = batch.Complete();
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

        activity?.SetTag(AllocatorTelemetry.Tags.Retries, batch.Retries);
        return outcomes;
    }

    /// <summary>
    /// The stages of one allocation for the requests at <paramref name="indexes"/>: the skip-locked
    /// statement, fresh retries for requests that found only locked rows, then the blocking
    /// statement (the strict strategy goes to it at once). No retry or fallback statement starts
    /// for a request past its deadline: it answers Unavailable, nothing written.
    /// </summary>
    private async Task RunStagesAsync(string poolId, AllocationStrategy strategy, AllocationBatch batch, List<int> indexes, CancellationToken cancellationToken)
    {
        if (strategy != AllocationStrategy.SkipLocked)
        {
            await AllocateBlockingAsync(poolId, batch, indexes, cancellationToken);
            return;
        }

        var pending = indexes;
        while (true)
        {
            pending = await AllocateOnceAsync(poolId, batch, pending, blocking: false, cancellationToken);
            pending = batch.DropPastDeadline(pending, _time.GetUtcNow());
            if (pending.Count == 0)
            {
                return;
            }

            if (batch.Retries == _options.SkipRetries)
            {
                // Last resort, in its own statement: wait for the true least-loaded rows.
                await AllocateBlockingAsync(poolId, batch, pending, cancellationToken);
                return;
            }

            batch.Retries++;
            await Task.Delay(_retry.Jitter(), _time, cancellationToken);
        }
    }

    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await LeaseAsync("release", poolId, allocationId, [poolId, allocationId, epoch, Channel], cancellationToken);
    }

    public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var ids = new Guid[releases.Count];
        var epochs = new long[releases.Count];
        var owners = new string?[releases.Count];
        for (var i = 0; i < releases.Count; i++)
        {
            ids[i] = releases[i].AllocationId;
            epochs[i] = releases[i].Epoch;
            owners[i] = releases[i].Owner;
        }

        using var activity = AllocatorTelemetry.ActivitySource.StartActivity("allocator.store.release");
        activity?.SetTag(AllocatorTelemetry.Tags.Store, Name);
        activity?.SetTag(AllocatorTelemetry.Tags.Database, _options.Database);
        activity?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        activity?.SetTag(AllocatorTelemetry.Tags.BatchSize, releases.Count);
        try
        {
            // A deadlock or lock timeout rolls the whole statement back, so re-running it whole
            // applies nothing twice.
            return await _retry.RunAsync<IReadOnlyList<LeaseResult>>(async ct =>
            {
                await using var command = Command("release_batch", poolId, ids, epochs, Channel, owners);
                await using var reader = await command.ExecuteReaderAsync(ct);
                var results = new LeaseResult?[releases.Count];
                while (await reader.ReadAsync(ct))
                {
                    var status = reader.GetString(1) switch
                    {
                        "released" => LeaseStatus.Ok,
                        "not_active" => LeaseStatus.NotActive,
                        "stale_epoch" => LeaseStatus.StaleEpoch,
                        _ => LeaseStatus.NotFound,
                    };
                    results[reader.GetInt32(0)] = status == LeaseStatus.NotFound
                        ? new LeaseResult(LeaseStatus.NotFound, null)
                        : new LeaseResult(status, PostgresRowReaders.ReadAllocation(reader, 2, poolId));
                }

                return Array.ConvertAll(results, r => r ?? throw new InvalidOperationException($"release_batch answered fewer rows than the {releases.Count} releases."));
            }, duplicateKeyIsTransient: false, cancellationToken, poolId);
        }
        catch (Exception ex) when (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }
    }

    public async Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        return await LeaseAsync("renew", poolId, allocationId, [poolId, allocationId, epoch, Nullable(Ms(lease), NpgsqlDbType.Bigint), new NpgsqlParameter { Value = (object?)owner ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text }], cancellationToken, owner);
    }

    public async Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var allocation = await _retry.RunAsync(async ct =>
        {
            await using var command = Command("get_allocation", poolId, allocationId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? PostgresRowReaders.ReadAllocation(reader, 0, poolId) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (allocation is null)
        {
            await EnsurePoolAsync(poolId, cancellationToken);
        }

        return allocation;
    }

    public async Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        var reaped = await ReapCoreAsync(maxCount, poolId: null, cancellationToken);

        // The history past its retention, a bounded number of rounds per reap (every instance
        // reaps every ReapInterval, so a backlog drains over a few intervals).
        for (var round = 0; round < 10; round++)
        {
            var purged = await _retry.RunAsync(async ct =>
            {
                await using var command = Command("purge_history", _retentionMs, _options.HistoryPurgeBatch);
                return await command.ExecuteNonQueryAsync(ct);
            }, duplicateKeyIsTransient: false, cancellationToken);
            if (purged < _options.HistoryPurgeBatch)
            {
                break;
            }
        }

        return reaped;
    }

    public async Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return await _retry.RunAsync(async ct =>
        {
            await using var command = Command("directory_get", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? new PoolPlacement(poolId, reader.GetString(0), reader.IsDBNull(1) ? null : reader.GetString(1)) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(replacement);
        AllocatorValidation.EnsurePoolId(replacement.PoolId);
        if (expected is not null && !string.Equals(expected.PoolId, replacement.PoolId, StringComparison.Ordinal))
        {
            throw new ArgumentException("The expected and the new entry must be of one pool.", nameof(expected));
        }

        // A lost insert race is not transient here: the caller reads the entry that won.
        return await _retry.RunAsync(async ct =>
        {
            await using var command = Command("directory_replace", replacement.PoolId,
                Text(expected?.Database), Text(expected?.MovingTo), replacement.Database, Text(replacement.MovingTo), Channel);
            return Convert.ToInt32(await command.ExecuteScalarAsync(ct), System.Globalization.CultureInfo.InvariantCulture) > 0;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(defaultDatabase);
        return await _retry.RunAsync<IReadOnlyDictionary<string, long>>(async ct =>
        {
            await using var command = Command("directory_count", defaultDatabase);
            await using var reader = await command.ExecuteReaderAsync(ct);
            var counts = new Dictionary<string, long>(StringComparer.Ordinal);
            while (await reader.ReadAsync(ct))
            {
                counts[reader.GetString(0)] = counts.GetValueOrDefault(reader.GetString(0)) + reader.GetInt64(1);
            }

            return counts;
        }, duplicateKeyIsTransient: false, cancellationToken);
    }

    public async Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var removal = await _retry.RunAsync(async ct =>
        {
            // Two statements, one implicit transaction: lock the pool row, then count and delete
            // with a snapshot taken after the lock (see remove_pool.sql for why not one).
            await using var batch = _dataSource.CreateBatch();
            batch.BatchCommands.Add(BatchCommand("remove_pool_lock", poolId));
            batch.BatchCommands.Add(BatchCommand("remove_pool", poolId, Channel));
            batch.Timeout = _commandTimeoutSeconds;
            await using var reader = await batch.ExecuteReaderAsync(ct);
            await reader.NextResultAsync(ct);
            await reader.ReadAsync(ct);
            return new PoolRemoval(reader.GetBoolean(0), reader.GetInt32(1) > 0, reader.GetInt32(2), reader.GetInt64(3));
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (removal.Removed)
        {
            ForgetSettings(poolId);
        }

        return removal;
    }

    public IDisposable Subscribe(Action<PoolChanged> handler) => _listener.Subscribe(handler);

    /// <summary>Ends up to <paramref name="maxCount"/> expired leases of one pool (or of all, when null); how many.</summary>
    private async Task<int> ReapAsync(int maxCount, string? poolId, CancellationToken cancellationToken) =>
        (await ReapCoreAsync(maxCount, poolId, cancellationToken)).Count;

    private Task<IReadOnlyList<Allocation>> ReapCoreAsync(int maxCount, string? poolId, CancellationToken cancellationToken) =>
        _retry.RunAsync<IReadOnlyList<Allocation>>(async ct =>
        {
            await using var command = Command("reap_expired", maxCount, Channel, new NpgsqlParameter { Value = (object?)poolId ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text });
            await using var reader = await command.ExecuteReaderAsync(ct);
            var list = new List<Allocation>();
            while (await reader.ReadAsync(ct))
            {
                list.Add(PostgresRowReaders.ReadReaped(reader));
            }

            return list;
        }, duplicateKeyIsTransient: false, cancellationToken);

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
            await _dataSource.DisposeAsync();
        }
    }

    /// <summary>
    /// One allocation statement for the requests at <paramref name="indexes"/>; decides their
    /// outcomes once it has committed and returns the indexes that found only locked rows.
    /// </summary>
    private async Task<List<int>> AllocateOnceAsync(string poolId, AllocationBatch batch, List<int> indexes, bool blocking, CancellationToken cancellationToken)
    {
        var requests = batch.Requests;
        var keys = new string[indexes.Count];
        var units = new int[indexes.Count];
        var leases = new long?[indexes.Count];
        var fallbackLeases = new long?[indexes.Count];
        var tags = new string[indexes.Count][];
        for (var i = 0; i < indexes.Count; i++)
        {
            var request = requests[indexes[i]];
            keys[i] = StoredSessionKey.Of(request); // the key is its owner's (issue 22)
            units[i] = request.Units;
            leases[i] = Ms(request.Lease);
            fallbackLeases[i] = Ms(request.FallbackLease);
            tags[i] = NormalizeTags(request.RequiredTags);
        }

        var tagsJson = JsonSerializer.Serialize(tags);
        var retries = batch.Retries;
        var rows = await _retry.RunAsync(async ct =>
        {
            await using var command = blocking
                ? Command("allocate_blocking", poolId, keys, units, Jsonb(tagsJson), leases, _lockTimeoutSetting, _retentionMs, fallbackLeases)
                : Command("allocate_skip_locked", poolId, keys, units, Jsonb(tagsJson), leases, _retentionMs, fallbackLeases);
            await using var reader = await command.ExecuteReaderAsync(ct);
            var answered = new List<(int Index, AllocationOutcome? Outcome)>();
            while (await reader.ReadAsync(ct))
            {
                answered.Add((indexes[reader.GetInt32(0)], PostgresRowReaders.ReadAllocationRow(reader, poolId, blocking, retries)));
            }

            return answered;
        }, duplicateKeyIsTransient: true, cancellationToken, poolId);

        // The rows arrive before the statement's commit is confirmed: decide only now.
        var pending = new List<int>();
        foreach (var (index, outcome) in rows)
        {
            if (outcome is null)
            {
                pending.Add(index); // found only locked rows
            }
            else
            {
                batch.Decide(index, outcome);
            }
        }

        return pending;
    }

    /// <summary>Another owner's allocation is answered as one that does not exist; one without an owner, to anyone.</summary>
    private static bool VisibleTo(Allocation allocation, string? owner) =>
        owner is null || allocation.Owner is null || string.Equals(allocation.Owner, owner, StringComparison.Ordinal);

    private async Task<LeaseResult> LeaseAsync(string script, string poolId, Guid allocationId, object?[] args, CancellationToken cancellationToken, string? owner = null)
    {
        var result = await _retry.RunAsync(async ct =>
        {
            await using var command = Command(script, args);
            await using var reader = await command.ExecuteReaderAsync(ct);
            if (!await reader.ReadAsync(ct))
            {
                return null;
            }

            var allocation = PostgresRowReaders.ReadAllocation(reader, 0, poolId);
            var changed = reader.GetBoolean(9);
            // renew.sql also says whether the lease had expired by the statement's clock (#5).
            var expired = script == "renew" && reader.GetBoolean(10);
            var status = changed ? LeaseStatus.Ok : !allocation.IsActive || expired ? LeaseStatus.NotActive : LeaseStatus.StaleEpoch;
            return new LeaseResult(status, allocation);
        }, duplicateKeyIsTransient: false, cancellationToken);
        if (result is null)
        {
            // Not in the hot table: ended (in the history until purged) or never there. A fresh
            // read also sees a release that committed while this statement waited for the row.
            var ended = await GetAllocationAsync(poolId, allocationId, cancellationToken);
            return ended is null || !VisibleTo(ended, owner) ? new LeaseResult(LeaseStatus.NotFound, null) : new LeaseResult(LeaseStatus.NotActive, ended);
        }

        return result;
    }

    /// <summary>
    /// The blocking statements for the requests still undecided: <b>one request per statement</b>,
    /// in request order, so a statement waiting for a row lock holds no other row of its own and
    /// blocking allocations cannot wait on each other (or on a release or registration batch, which
    /// lock in id order) in a cycle (#6: 8 concurrent strict batches of mixed units deadlocked when
    /// one statement picked row after row in score order). Each wait is bounded by the lock
    /// timeout, and no statement starts for a request past its deadline. When its rows stay
    /// locked past the lock timeout (after the transient retries), only that request is answered
    /// <see cref="AllocationStatus.Unavailable"/> (nothing written; ADR 0007).
    /// </summary>
    private async Task AllocateBlockingAsync(string poolId, AllocationBatch batch, List<int> pending, CancellationToken cancellationToken)
    {
        foreach (var index in pending)
        {
            if (batch.DropPastDeadline([index], _time.GetUtcNow()).Count == 0)
            {
                continue;
            }

            try
            {
                if ((await AllocateOnceAsync(poolId, batch, [index], blocking: true, cancellationToken)).Count > 0)
                {
                    batch.Decide(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, true, batch.Retries)));
                }
            }
            catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.Unavailable && !ex.OutcomeUnknown && !cancellationToken.IsCancellationRequested)
            {
                batch.DecideIfOpen(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, true, batch.Retries)));
            }
        }
    }

    private async Task<PoolSettings?> LoadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        await SettingsCache.GetAsync(poolId, cancellationToken);

    /// <summary>One fresh read of a pool's settings (the cache's loader, and <see cref="GetPoolAsync"/>).</summary>
    private Task<PoolSettings?> ReadSettingsAsync(string poolId, CancellationToken cancellationToken) =>
        _retry.RunAsync(async ct =>
        {
            await using var command = Command("get_pool", poolId);
            await using var reader = await command.ExecuteReaderAsync(ct);
            return await reader.ReadAsync(ct) ? PostgresRowReaders.ReadSettings(reader, 0) : null;
        }, duplicateKeyIsTransient: false, cancellationToken);

    private void ForgetSettings(string poolId) => SettingsCache.Invalidate(poolId);

    private async Task EnsurePoolAsync(string poolId, CancellationToken cancellationToken)
    {
        if (await LoadSettingsAsync(poolId, cancellationToken) is null)
        {
            throw AllocatorException.PoolNotFound(poolId);
        }
    }

    private void OnChange(PoolChanged change)
    {
        if (change.Kind == PoolChangeKind.SettingsChanged)
        {
            ForgetSettings(change.PoolId);
        }
    }

    private NpgsqlCommand Command(string script, params object?[] args)
    {
        var command = _dataSource.CreateCommand(_sql.Get(script));
        command.CommandTimeout = _commandTimeoutSeconds;
        foreach (var arg in args)
        {
            command.Parameters.Add(Parameter(arg));
        }

        return command;
    }

    /// <summary>
    /// A parameter of its own for every command: a typed one given by the caller is cloned, since
    /// a retry builds its command again from the same arguments and Npgsql refuses a parameter
    /// that already belongs to the first attempt's command.
    /// </summary>
    private static NpgsqlParameter Parameter(object? arg) => arg is NpgsqlParameter typed ? typed.Clone() : new NpgsqlParameter { Value = arg ?? DBNull.Value };

    private NpgsqlBatchCommand BatchCommand(string script, params object?[] args)
    {
        var command = new NpgsqlBatchCommand(_sql.Get(script));
        foreach (var arg in args)
        {
            command.Parameters.Add(Parameter(arg));
        }

        return command;
    }

    private static NpgsqlParameter Jsonb(string json) => new() { Value = json, NpgsqlDbType = NpgsqlDbType.Jsonb };

    private static NpgsqlParameter Nullable<TValue>(TValue? value, NpgsqlDbType type)
        where TValue : struct => new() { Value = value.HasValue ? value.Value : DBNull.Value, NpgsqlDbType = type };

    private static NpgsqlParameter Text(string? value) => new() { Value = (object?)value ?? DBNull.Value, NpgsqlDbType = NpgsqlDbType.Text };

    private static long? Ms(TimeSpan? value) => value is { } v ? (long)v.TotalMilliseconds : null;

    private static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];


}
