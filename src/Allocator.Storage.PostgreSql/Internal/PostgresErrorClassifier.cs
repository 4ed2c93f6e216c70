using System.Net.Sockets;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

internal enum PostgresErrorKind
{
    Other,
    DuplicateKey,
    Deadlock,
    SerializationFailure,
    LockTimeout,
    QueryCanceled,
    PoolNotFound,

    /// <summary>No connection was made, so no statement was sent: too many connections (53300), starting up or shutting down (57P03), connection refused (08001, 08004, a refused socket). Nothing written; retrying is safe.</summary>
    ConnectionRejected,

    /// <summary>
    /// A prepared statement whose result type a schema change altered (0A000 from
    /// RevalidateCachedQuery: "cached plan must not change result type"), e.g. a migration run
    /// by the next build during a rolling upgrade. Raised when the statement is bound, before it
    /// runs; Npgsql drops the prepared statement, so a fresh attempt prepares it again.
    /// </summary>
    PreparedStatementStale,

    /// <summary>The connection broke or timed out while a statement may have run (57P01, 57P02, 08000, 08003, 08006, 08007, socket errors, timeouts): the outcome is unknown.</summary>
    ConnectionLost,
}

/// <summary>Classifies errors by SQLSTATE (and, for client-side failures, by exception type), never by message text: texts are localized and change between versions.</summary>
internal static class PostgresErrorClassifier
{
    public static PostgresErrorKind Classify(string? sqlState) => sqlState switch
    {
        PostgresErrorCodes.UniqueViolation => PostgresErrorKind.DuplicateKey,              // 23505
        PostgresErrorCodes.DeadlockDetected => PostgresErrorKind.Deadlock,                 // 40P01
        PostgresErrorCodes.SerializationFailure => PostgresErrorKind.SerializationFailure, // 40001
        PostgresErrorCodes.LockNotAvailable => PostgresErrorKind.LockTimeout,              // 55P03
        PostgresErrorCodes.QueryCanceled => PostgresErrorKind.QueryCanceled,               // 57014
        PostgresErrorCodes.NoDataFound => PostgresErrorKind.PoolNotFound,                  // P0002, raised by allocate_batch
        // 23503: the only foreign keys the store's statements can violate point at pools: a worker
        // registered into a pool that a move removed meanwhile (issue 23, remove_pool.sql).
        PostgresErrorCodes.ForeignKeyViolation => PostgresErrorKind.PoolNotFound,
        PostgresErrorCodes.TooManyConnections or PostgresErrorCodes.CannotConnectNow                              // 53300, 57P03
            or PostgresErrorCodes.SqlClientUnableToEstablishSqlConnection                                         // 08001
            or PostgresErrorCodes.SqlServerRejectedEstablishmentOfSqlConnection => PostgresErrorKind.ConnectionRejected, // 08004
        PostgresErrorCodes.AdminShutdown or PostgresErrorCodes.CrashShutdown                                      // 57P01, 57P02
            or PostgresErrorCodes.ConnectionException or PostgresErrorCodes.ConnectionDoesNotExist                // 08000, 08003
            or PostgresErrorCodes.ConnectionFailure or PostgresErrorCodes.ProtocolViolation => PostgresErrorKind.ConnectionLost, // 08006, 08P01
        _ => PostgresErrorKind.Other,
    };

    public static PostgresErrorKind Classify(Exception exception) => exception switch
    {
        // 0A000 is also any "feature not supported"; only the plan cache's means a stale statement.
        PostgresException { SqlState: PostgresErrorCodes.FeatureNotSupported, Routine: "RevalidateCachedQuery" } => PostgresErrorKind.PreparedStatementStale,
        PostgresException pg => Classify(pg.SqlState),
        // A refused socket: nothing reached the server.
        NpgsqlException { InnerException: SocketException { SocketErrorCode: SocketError.ConnectionRefused } } => PostgresErrorKind.ConnectionRejected,
        // Anything else on the wire (a reset, a command timeout, pool exhaustion while the caller waited): unknown.
        NpgsqlException or TimeoutException or IOException or SocketException => PostgresErrorKind.ConnectionLost,
        _ => PostgresErrorKind.Other,
    };

    /// <summary>Worth a fresh attempt after a jitter: the statement rolled back (or never ran) and nothing was written.</summary>
    public static bool IsTransient(PostgresErrorKind kind, bool duplicateKeyIsTransient) => kind switch
    {
        PostgresErrorKind.Deadlock or PostgresErrorKind.SerializationFailure or PostgresErrorKind.LockTimeout or PostgresErrorKind.ConnectionRejected
            or PostgresErrorKind.PreparedStatementStale => true,
        PostgresErrorKind.DuplicateKey => duplicateKeyIsTransient,
        _ => false,
    };
}
