using System.Data;
using Allocator.Storage.Internal;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// Builds one <see cref="SqlCommand"/> per operation from its embedded script. Every value is a
/// typed <see cref="SqlParameter"/>; <see cref="Create"/> refuses a command whose parameters are
/// not exactly the script's undeclared <c>@names</c>, so a script and its call site cannot drift.
/// </summary>
internal sealed class SqlServerCommandFactory(SqlScripts scripts, TimeSpan commandTimeout, TimeSpan? historyRetention = null, int historyPurgeBatch = 10_000)
{
    private readonly long _retentionMs = (long)(historyRetention ?? TimeSpan.FromHours(24)).TotalMilliseconds;

    private readonly int _commandTimeoutSeconds = Math.Max(1, (int)Math.Ceiling(commandTimeout.TotalSeconds));

    public SqlScripts Scripts { get; } = scripts;

    public SqlCommand UpsertPool(string poolId, PoolSettings settings) => Create("upsert_pool",
        PoolId(poolId),
        new SqlParameter("@strategy", SqlDbType.TinyInt) { Value = (byte)settings.Strategy },
        BigInt("@default_lease_ms", Milliseconds(settings.DefaultLease)),
        BigInt("@max_wait_ms", Milliseconds(settings.MaxWait)),
        BigInt("@heartbeat_timeout_ms", Milliseconds(settings.HeartbeatTimeout)),
        new SqlParameter("@serialize_registrations", SqlDbType.Bit) { Value = settings.SerializeRegistrations },
        new SqlParameter("@placement", SqlDbType.TinyInt) { Value = (byte)settings.Placement });

    public SqlCommand GetPool(string poolId) => Create("get_pool", PoolId(poolId));

    public SqlCommand GetPoolStatistics(string poolId) => Create("get_pool_statistics", PoolId(poolId));

    public SqlCommand RegisterWorkers(string poolId, string workersJson) => Create("register_workers", PoolId(poolId), Json("@workers", workersJson));

    public SqlCommand DeregisterWorker(string poolId, string workerId) => Create("deregister_worker", PoolId(poolId), WorkerId(workerId));

    public SqlCommand SetWorkerState(string poolId, string workerId, WorkerState state) => Create("set_worker_state",
        PoolId(poolId), WorkerId(workerId), new SqlParameter("@state", SqlDbType.TinyInt) { Value = (byte)state });

    public SqlCommand ReportLoad(string poolId, string workerId, long epoch, int? loadIndex) => Create("report_load",
        PoolId(poolId), WorkerId(workerId), BigInt("@epoch", epoch),
        new SqlParameter("@load_index", SqlDbType.Int) { Value = loadIndex is { } i ? i : DBNull.Value });

    public SqlCommand GetWorker(string poolId, string workerId) => Create("get_worker", PoolId(poolId), WorkerId(workerId));

    public SqlCommand GetWorkers(string poolId) => Create("get_workers", PoolId(poolId));

    /// <param name="fence">The sending activation's fence (issue 47); null: none.</param>
    public SqlCommand Allocate(string poolId, string requestsJson, long? fence = null) =>
        Create("allocate_skip_locked", PoolId(poolId), Json("@requests", requestsJson), BigInt("@retention_ms", _retentionMs), BigInt("@fence", fence));

    /// <summary>One request's blocking statement (one request per statement: issue 12, #6).</summary>
    /// <param name="fence">The sending activation's fence (issue 47); null: none.</param>
    public SqlCommand AllocateBlocking(string poolId, Guid allocationId, AllocationRequest request, bool fallback, long? fence = null) => Create("allocate_blocking",
        PoolId(poolId),
        AllocationId(allocationId),
        new SqlParameter("@session_key", SqlDbType.NVarChar, StoredSessionKey.MaxLength) { Value = StoredSessionKey.Of(request) },
        new SqlParameter("@units", SqlDbType.Int) { Value = request.Units },
        new SqlParameter("@tags", SqlDbType.NVarChar, -1) { Value = (object?)TagsJson(request.RequiredTags) ?? DBNull.Value },
        BigInt("@lease_ms", Milliseconds(request.Lease)),
        BigInt("@fallback_lease_ms", Milliseconds(request.FallbackLease)),
        new SqlParameter("@fallback", SqlDbType.Bit) { Value = fallback },
        BigInt("@retention_ms", _retentionMs),
        BigInt("@fence", fence));

    public SqlCommand Release(string poolId, Guid allocationId, long epoch) => Create("release",
        PoolId(poolId), AllocationId(allocationId), BigInt("@epoch", epoch));

    /// <param name="fence">The releasing activation's fence, for the release of an abandoned allocation (issue 47); null for brokers' releases.</param>
    public SqlCommand ReleaseBatch(string poolId, string releasesJson, long? fence = null) => Create("release_batch", PoolId(poolId), Json("@releases", releasesJson), BigInt("@fence", fence));

    public SqlCommand ClaimPoolActivation(string poolId) => Create("claim_pool_activation", PoolId(poolId));

    public SqlCommand Renew(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner) => Create("renew",
        PoolId(poolId), AllocationId(allocationId), BigInt("@epoch", epoch), BigInt("@lease_ms", Milliseconds(lease)),
        new SqlParameter("@owner", SqlDbType.NVarChar, AllocatorLimits.MaxIdLength) { Value = (object?)owner ?? DBNull.Value });

    public SqlCommand GetAllocation(string poolId, Guid allocationId) => Create("get_allocation", PoolId(poolId), AllocationId(allocationId));

    public SqlCommand GetAllocationByKey(string poolId, string storedKey) => Create("get_allocation_by_key",
        PoolId(poolId), new SqlParameter("@session_key", SqlDbType.NVarChar, StoredSessionKey.MaxLength) { Value = storedKey }, BigInt("@retention_ms", _retentionMs));

    public SqlCommand ReapExpired(int maxCount, string? poolId = null) => Create("reap_expired",
        new SqlParameter("@max_count", SqlDbType.Int) { Value = maxCount },
        new SqlParameter("@pool_id", SqlDbType.NVarChar, AllocatorLimits.MaxIdLength) { Value = (object?)poolId ?? DBNull.Value },
        BigInt("@retention_ms", _retentionMs),
        new SqlParameter("@purge_count", SqlDbType.Int) { Value = historyPurgeBatch });

    public SqlCommand GetPoolChanges() => Create("get_pool_changes");

    public SqlCommand DirectoryGet(string poolId) => Create("directory_get", PoolId(poolId));

    public SqlCommand DirectoryReplace(PoolPlacement? expected, PoolPlacement replacement) => Create("directory_replace",
        PoolId(replacement.PoolId),
        DatabaseName("@expected_database", expected?.Database),
        DatabaseName("@expected_moving_to", expected?.MovingTo),
        DatabaseName("@database", replacement.Database),
        DatabaseName("@moving_to", replacement.MovingTo));

    public SqlCommand DirectoryCount(string defaultDatabase) => Create("directory_count", DatabaseName("@default_database", defaultDatabase));

    public SqlCommand RemovePool(string poolId) => Create("remove_pool", PoolId(poolId));

    public SqlCommand MigrateLock(string resource, string schemaName, TimeSpan lockTimeout) => Create("migrate_lock",
        new SqlParameter("@resource", SqlDbType.NVarChar, 255) { Value = resource },
        new SqlParameter("@schema_name", SqlDbType.NVarChar, 128) { Value = schemaName },
        new SqlParameter("@lock_timeout_ms", SqlDbType.Int) { Value = (int)lockTimeout.TotalMilliseconds });

    public SqlCommand MigrateVersions() => Create("migrate_versions");

    public SqlCommand MigrateRecord(SqlMigration migration) => Create("migrate_record",
        new SqlParameter("@version", SqlDbType.Int) { Value = migration.Version },
        new SqlParameter("@name", SqlDbType.NVarChar, 200) { Value = migration.Name },
        new SqlParameter("@checksum", SqlDbType.Char, 64) { Value = migration.Checksum });

    /// <summary>A migration script: no parameters (it may use none).</summary>
    public SqlCommand Migration(SqlMigration migration)
    {
        var script = new SqlScript(migration.Name, Scripts.Render(migration.RawText));
        return Create(script, []);
    }

    public SqlCommand Create(string scriptName, params SqlParameter[] parameters) => Create(Scripts[scriptName], parameters);

    private SqlCommand Create(SqlScript script, SqlParameter[] parameters)
    {
        var given = parameters.Select(p => p.ParameterName.TrimStart('@')).ToHashSet(StringComparer.OrdinalIgnoreCase);
        if (!given.SetEquals(script.Parameters))
        {
            throw new InvalidOperationException(
                $"Script {script.Name}.sql uses [{string.Join(", ", script.Parameters.Order(StringComparer.Ordinal))}] " +
                $"but the command passes [{string.Join(", ", given.Order(StringComparer.Ordinal))}].");
        }

        var command = new SqlCommand(script.Text) { CommandType = CommandType.Text, CommandTimeout = _commandTimeoutSeconds };
        command.Parameters.AddRange(parameters);
        return command;
    }

    // Types match the columns exactly (nvarchar ids of fixed size): a mismatched type would make
    // SQL Server convert the column side and turn the index seeks into scans.
    private static SqlParameter PoolId(string poolId) => new("@pool_id", SqlDbType.NVarChar, AllocatorLimits.MaxIdLength) { Value = poolId };

    private static SqlParameter WorkerId(string workerId) => new("@worker_id", SqlDbType.NVarChar, AllocatorLimits.MaxIdLength) { Value = workerId };

    /// <summary>A database name of the pool directory (nvarchar(63), the column's type).</summary>
    private static SqlParameter DatabaseName(string name, string? value) => new(name, SqlDbType.NVarChar, 63) { Value = (object?)value ?? DBNull.Value };

    private static SqlParameter AllocationId(Guid id) => new("@allocation_id", SqlDbType.UniqueIdentifier) { Value = id };

    private static SqlParameter Json(string name, string json) => new(name, SqlDbType.NVarChar, -1) { Value = json };

    private static SqlParameter BigInt(string name, long? value) => new(name, SqlDbType.BigInt) { Value = value is { } v ? v : DBNull.Value };

    /// <summary>Required tags as the JSON array the scripts read with <c>OPENJSON</c>; <see langword="null"/> when there are none.</summary>
    internal static string? TagsJson(IReadOnlyList<string>? tags) =>
        tags is { Count: > 0 } ? System.Text.Json.JsonSerializer.Serialize(tags) : null;

    internal static long? Milliseconds(TimeSpan? value) => value is { } v ? (long)Math.Ceiling(v.TotalMilliseconds) : null;
}
