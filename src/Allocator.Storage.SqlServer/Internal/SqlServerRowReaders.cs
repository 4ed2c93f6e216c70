using System.Text.Json;
using Allocator.Storage.Internal;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>Turns result rows of the store's scripts into domain records (columns found by name).</summary>
internal static class SqlServerRowReaders
{
    public static async Task<int> ReadStatusAsync(SqlDataReader reader, CancellationToken cancellationToken)
    {
        await reader.ReadAsync(cancellationToken);
        return reader.GetByte(0);
    }

    public static async Task<LeaseResult> ReadLeaseResultAsync(SqlDataReader reader, CancellationToken cancellationToken)
    {
        await reader.ReadAsync(cancellationToken);
        var status = ToLeaseStatus(reader.GetByte(0));
        await reader.NextResultAsync(cancellationToken);
        var allocation = await reader.ReadAsync(cancellationToken) ? ReadAllocation(reader) : null;
        return new LeaseResult(status, status == LeaseStatus.NotFound ? null : allocation);
    }

    public static LeaseStatus ToLeaseStatus(byte status) => status switch
    {
        0 => LeaseStatus.Ok,
        2 => LeaseStatus.NotActive,
        3 => LeaseStatus.StaleEpoch,
        _ => LeaseStatus.NotFound,
    };

    public static async Task<IReadOnlyList<AllocationRow>> ReadAllocationRowsAsync(SqlDataReader reader, CancellationToken cancellationToken)
    {
        var rows = new List<AllocationRow>();
        while (await reader.ReadAsync(cancellationToken))
        {
            var status = reader.GetByte(reader.GetOrdinal("status"));
            rows.Add(new AllocationRow(
                reader.GetInt32(reader.GetOrdinal("i")),
                status,
                reader.GetInt32(reader.GetOrdinal("rank_")),
                reader.GetInt64(reader.GetOrdinal("excess_score")),
                status is 0 or 1 ? ReadAllocation(reader) : null));
        }

        return rows;
    }

    public static PoolSettings ReadSettings(SqlDataReader reader)
    {
        var defaultLease = reader.GetOrdinal("default_lease_ms");
        var heartbeat = reader.GetOrdinal("heartbeat_timeout_ms");
        return new PoolSettings
        {
            Strategy = (AllocationStrategy)reader.GetByte(reader.GetOrdinal("strategy")),
            DefaultLease = reader.IsDBNull(defaultLease) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(defaultLease)),
            MaxWait = TimeSpan.FromMilliseconds(reader.GetInt64(reader.GetOrdinal("max_wait_ms"))),
            HeartbeatTimeout = reader.IsDBNull(heartbeat) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(heartbeat)),
            SerializeRegistrations = reader.GetBoolean(reader.GetOrdinal("serialize_registrations")),
            Placement = (Placement)reader.GetByte(reader.GetOrdinal("placement")),
        };
    }

    public static Worker ReadWorker(SqlDataReader reader)
    {
        var loadIndex = reader.GetOrdinal("reported_load_index");
        return new Worker
        {
            PoolId = reader.GetString(reader.GetOrdinal("pool_id")),
            WorkerId = reader.GetString(reader.GetOrdinal("worker_id")),
            Address = reader.GetString(reader.GetOrdinal("address")),
            Capacity = reader.GetInt32(reader.GetOrdinal("capacity")),
            Load = reader.GetInt32(reader.GetOrdinal("load_slots")),
            ReportedLoadIndex = reader.IsDBNull(loadIndex) ? null : reader.GetInt32(loadIndex),
            State = (WorkerState)reader.GetByte(reader.GetOrdinal("state")),
            Tags = JsonSerializer.Deserialize<string[]>(reader.GetString(reader.GetOrdinal("tags"))) ?? [],
            Epoch = reader.GetInt64(reader.GetOrdinal("epoch")),
            LastHeartbeat = Utc(reader.GetDateTime(reader.GetOrdinal("last_heartbeat"))),
        };
    }

    public static Allocation ReadAllocation(SqlDataReader reader)
    {
        var expires = reader.GetOrdinal("expires_at");
        var ended = reader.GetOrdinal("ended_at");
        var (owner, sessionKey) = StoredSessionKey.Split(reader.GetString(reader.GetOrdinal("session_key")));
        return new Allocation
        {
            AllocationId = reader.GetGuid(reader.GetOrdinal("allocation_id")),
            PoolId = reader.GetString(reader.GetOrdinal("pool_id")),
            WorkerId = reader.GetString(reader.GetOrdinal("worker_id")),
            Address = reader.GetString(reader.GetOrdinal("address")),
            SessionKey = sessionKey,
            Owner = owner,
            Units = reader.GetInt32(reader.GetOrdinal("units")),
            Epoch = reader.GetInt64(reader.GetOrdinal("epoch")),
            CreatedAt = Utc(reader.GetDateTime(reader.GetOrdinal("created_at"))),
            ExpiresAt = reader.IsDBNull(expires) ? null : Utc(reader.GetDateTime(expires)),
            EndedAt = reader.IsDBNull(ended) ? null : Utc(reader.GetDateTime(ended)),
        };
    }

    /// <summary>The row's end_reason column (get_allocation.sql); <see langword="null"/> while active.</summary>
    public static AllocationEndReason? ReadEndReason(SqlDataReader reader)
    {
        var reason = reader.GetOrdinal("end_reason");
        return reader.IsDBNull(reason) ? null : EndReasons.Parse(reader.GetString(reason));
    }

        // datetime2 columns hold UTC (SYSUTCDATETIME): the database clock decides leases and heartbeats.
    public static DateTimeOffset Utc(DateTime value) => new(DateTime.SpecifyKind(value, DateTimeKind.Utc));
}

/// <summary>One row of an allocation script's answer: status 0 allocated, 1 existing, 2 no capacity, 3 only locked rows had room.</summary>
internal sealed record AllocationRow(int Index, byte Status, int Rank, long ExcessScore, Allocation? Allocation)
{
    public const byte Allocated = 0;
    public const byte Existing = 1;
    public const byte NoCapacity = 2;
    public const byte OnlyLocked = 3;
}
