using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>Turns result rows of the store's statements into domain records; <c>at</c> is the first column.</summary>
internal static class PostgresRowReaders
{
    public static PoolSettings ReadSettings(NpgsqlDataReader reader, int at)
    {
        AllocationStrategyNames.TryParse(reader.GetString(at), out var strategy);
        return new PoolSettings
        {
            Strategy = strategy,
            DefaultLease = reader.IsDBNull(at + 1) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(at + 1)),
            MaxWait = TimeSpan.FromMilliseconds(reader.GetInt64(at + 2)),
            HeartbeatTimeout = reader.IsDBNull(at + 3) ? null : TimeSpan.FromMilliseconds(reader.GetInt64(at + 3)),
            SerializeRegistrations = reader.GetBoolean(at + 4),
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
        SessionKey = reader.GetString(at + 3),
        Units = reader.GetInt32(at + 4),
        Epoch = reader.GetInt64(at + 5),
        CreatedAt = reader.GetFieldValue<DateTimeOffset>(at + 6),
        ExpiresAt = reader.IsDBNull(at + 7) ? null : reader.GetFieldValue<DateTimeOffset>(at + 7),
        EndedAt = reader.IsDBNull(at + 8) ? null : reader.GetFieldValue<DateTimeOffset>(at + 8),
    };
}
