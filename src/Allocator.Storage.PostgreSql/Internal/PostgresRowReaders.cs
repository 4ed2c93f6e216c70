using Allocator.Storage.Internal;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>Turns result rows of the store's statements into domain records; <c>at</c> is the first column.</summary>
internal static class PostgresRowReaders
{
    /// <param name="placementAt">The placement's column (added after the others, issue 49).</param>
    public static PoolSettings ReadSettings(NpgsqlDataReader reader, int at, int placementAt)
    {
        AllocationStrategyNames.TryParse(reader.GetString(at), out var strategy);
        PlacementNames.TryParse(reader.GetString(placementAt), out var placement);
        return new PoolSettings
        {
            Strategy = strategy,
            DefaultLease = reader.IsDBNull(at + 1) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(at + 1)),
            MaxWait = TimeSpan.FromMilliseconds(reader.GetInt64(at + 2)),
            HeartbeatTimeout = reader.IsDBNull(at + 3) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(at + 3)),
            SerializeRegistrations = reader.GetBoolean(at + 4),
            Placement = placement,
        };
    }

    public static Worker ReadWorker(NpgsqlDataReader reader, int at, string poolId) => new()
    {
        PoolId = poolId,
        WorkerId = reader.GetString(at),
        Address = reader.GetString(at + 1),
        Capacity = reader.GetInt32(at + 2),
        Load = reader.GetInt32(at + 3),
        ReportedLoadIndex = reader.IsDBNull(at + 4) ? null : reader.GetInt32(at + 4),
        State = reader.GetString(at + 5) switch
        {
            "available" => WorkerState.Available,
            "draining" => WorkerState.Draining,
            _ => WorkerState.Offline,
        },
        Tags = reader.GetFieldValue<string[]>(at + 6),
        Epoch = reader.GetInt64(at + 7),
        LastHeartbeat = reader.GetFieldValue<DateTimeOffset>(at + 8),
    };

    public static Allocation ReadAllocation(NpgsqlDataReader reader, int at, string poolId) => new()
    {
        AllocationId = reader.GetGuid(at),
        PoolId = poolId,
        WorkerId = reader.GetString(at + 1),
        Address = reader.GetString(at + 2),
        SessionKey = StoredSessionKey.Split(reader.GetString(at + 3)).SessionKey,
        Owner = StoredSessionKey.Split(reader.GetString(at + 3)).Owner,
        Units = reader.GetInt32(at + 4),
        Epoch = reader.GetInt64(at + 5),
        CreatedAt = reader.GetFieldValue<DateTimeOffset>(at + 6),
        ExpiresAt = reader.IsDBNull(at + 7) ? null : reader.GetFieldValue<DateTimeOffset>(at + 7),
        EndedAt = reader.IsDBNull(at + 8) ? null : reader.GetFieldValue<DateTimeOffset>(at + 8),
    };

    /// <summary>An end_reason column as the stores write it; <see langword="null"/> while active.</summary>
    public static AllocationEndReason? ReadEndReason(NpgsqlDataReader reader, int at) =>
        reader.IsDBNull(at) ? null : EndReasons.Parse(reader.GetString(at));

    /// <summary>A row of reap_expired.sql: the allocation it ended (pool id included).</summary>
    public static Allocation ReadReaped(NpgsqlDataReader reader) => new()
    {
        AllocationId = reader.GetGuid(0),
        PoolId = reader.GetString(1),
        WorkerId = reader.GetString(2),
        Address = reader.GetString(3),
        SessionKey = StoredSessionKey.Split(reader.GetString(4)).SessionKey,
        Owner = StoredSessionKey.Split(reader.GetString(4)).Owner,
        Units = reader.GetInt32(5),
        Epoch = reader.GetInt64(6),
        CreatedAt = reader.GetFieldValue<DateTimeOffset>(7),
        ExpiresAt = reader.IsDBNull(8) ? null : reader.GetFieldValue<DateTimeOffset>(8),
        EndedAt = reader.GetFieldValue<DateTimeOffset>(9),
    };

    /// <summary>
    /// A row of allocate_batch: the outcome of one request, or <see langword="null"/> when it found
    /// only locked rows ('locked': the caller retries it in a fresh statement).
    /// </summary>
    public static AllocationOutcome? ReadAllocationRow(NpgsqlDataReader reader, string poolId, bool blocking, int retries)
    {
        var status = reader.GetString(1);
        var rank = reader.GetInt32(10);
        var decision = new AllocationDecision(rank, reader.GetInt64(11), blocking ? 0 : rank, blocking, retries);
        switch (status)
        {
            case "locked":
                return null;
            case "no_capacity":
                return AllocationOutcome.NoCapacity(decision);
            default:
                var allocation = new Allocation
                {
                    AllocationId = reader.GetGuid(2),
                    PoolId = poolId,
                    WorkerId = reader.GetString(3),
                    Address = reader.GetString(4),
                    SessionKey = StoredSessionKey.Split(reader.GetString(5)).SessionKey,
                    Owner = StoredSessionKey.Split(reader.GetString(5)).Owner,
                    Units = reader.GetInt32(6),
                    Epoch = reader.GetInt64(7),
                    CreatedAt = reader.GetFieldValue<DateTimeOffset>(8),
                    ExpiresAt = reader.IsDBNull(9) ? null : reader.GetFieldValue<DateTimeOffset>(9),
                    EndedAt = reader.IsDBNull(12) ? null : reader.GetFieldValue<DateTimeOffset>(12),
                };
                return status == "existing"
                    ? new AllocationOutcome(AllocationStatus.Existing, allocation, new AllocationDecision(0, 0, 0, blocking, retries))
                    : new AllocationOutcome(AllocationStatus.Allocated, allocation, decision);
        }
    }
}
