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
}

/// <summary>Classifies errors by SQLSTATE only: message texts are localized and change between versions.</summary>
internal static class PostgresErrorClassifier
{
    public static PostgresErrorKind Classify(string? sqlState) => sqlState switch
    {
        PostgresErrorCodes.UniqueViolation => PostgresErrorKind.DuplicateKey,         // 23505
        PostgresErrorCodes.DeadlockDetected => PostgresErrorKind.Deadlock,               // 40P01
        PostgresErrorCodes.SerializationFailure => PostgresErrorKind.SerializationFailure, // 40001
        PostgresErrorCodes.LockNotAvailable => PostgresErrorKind.LockTimeout,            // 55P03
        PostgresErrorCodes.QueryCanceled => PostgresErrorKind.QueryCanceled,             // 57014
        PostgresErrorCodes.NoDataFound => PostgresErrorKind.PoolNotFound,                // P0002, raised by allocate_batch
        _ => PostgresErrorKind.Other,
    };

    public static PostgresErrorKind Classify(Exception exception) =>
        exception is PostgresException pg ? Classify(pg.SqlState) : PostgresErrorKind.Other;

    /// <summary>Worth a fresh attempt after a jitter: the statement rolled back and nothing was written.</summary>
    public static bool IsTransient(PostgresErrorKind kind, bool uniqueViolationIsTransient) => kind switch
    {
        PostgresErrorKind.Deadlock or PostgresErrorKind.SerializationFailure or PostgresErrorKind.LockTimeout => true,
        PostgresErrorKind.DuplicateKey => uniqueViolationIsTransient,
        _ => false,
    };
}
