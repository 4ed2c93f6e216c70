namespace Allocator.Storage.SqlServer.Internal;

/// <summary>What a SQL Server error means to the store. Decided by error number, never by message text.</summary>
internal enum SqlServerErrorKind
{
    /// <summary>Not one the store handles: rethrown.</summary>
    Other,

    /// <summary>2627/2601: a concurrent transaction inserted the same key first (e.g. one session key). Re-run: the re-run reads the existing row.</summary>
    DuplicateKey,

    /// <summary>1205: chosen as deadlock victim; the transaction was rolled back. Re-run the whole transaction after a jitter.</summary>
    Deadlock,

    /// <summary>1222: SET LOCK_TIMEOUT ran out; with XACT_ABORT ON the transaction was rolled back, nothing was written.</summary>
    LockTimeout,

    /// <summary>-2: the client gave up (command timeout). The outcome is unknown; a retry with the same idempotency key resolves it.</summary>
    ClientTimeout,

    /// <summary>
    /// 10053, 10054, 10060, 64, 121, 233: the connection broke (transport-level errors) while the
    /// command may have run: the outcome is unknown; the caller retries with the same key.
    /// </summary>
    ConnectionLost,

    /// <summary>50404 (raised by the scripts): the pool does not exist.</summary>
    PoolNotFound,

    /// <summary>50412 (raised by the allocation scripts): the pool's strategy is not the one the caller assumed.</summary>
    StrategyChanged,
}

internal static class SqlServerErrorClassifier
{
    public const int UniqueConstraintViolation = 2627;
    public const int UniqueIndexViolation = 2601;
    public const int DeadlockVictim = 1205;
    public const int LockRequestTimeout = 1222;
    public const int ClientTimeoutNumber = -2;
    public const int PoolNotFoundNumber = 50404;
    public const int StrategyChangedNumber = 50412;

    public static SqlServerErrorKind Classify(int number) => number switch
    {
        UniqueConstraintViolation or UniqueIndexViolation => SqlServerErrorKind.DuplicateKey,
        DeadlockVictim => SqlServerErrorKind.Deadlock,
        LockRequestTimeout => SqlServerErrorKind.LockTimeout,
        ClientTimeoutNumber => SqlServerErrorKind.ClientTimeout,
        PoolNotFoundNumber => SqlServerErrorKind.PoolNotFound,
        StrategyChangedNumber => SqlServerErrorKind.StrategyChanged,
        10053 or 10054 or 10060 or 64 or 121 or 233 => SqlServerErrorKind.ConnectionLost,
        _ => SqlServerErrorKind.Other,
    };

    /// <summary>
    /// Classifies an exception's numbers (<c>SqlException.Number</c> first, then each
    /// <c>SqlError.Number</c>): the first number the store knows wins, so a known error reported
    /// after an informational one is still recognised.
    /// </summary>
    public static SqlServerErrorKind Classify(IEnumerable<int> numbers)
    {
        ArgumentNullException.ThrowIfNull(numbers);
        foreach (var number in numbers)
        {
            var kind = Classify(number);
            if (kind != SqlServerErrorKind.Other)
            {
                return kind;
            }
        }

        return SqlServerErrorKind.Other;
    }

    /// <summary>Whether re-running the whole transaction is safe and useful.</summary>
    public static bool IsRetryable(SqlServerErrorKind kind) => kind is SqlServerErrorKind.Deadlock or SqlServerErrorKind.DuplicateKey;
}
