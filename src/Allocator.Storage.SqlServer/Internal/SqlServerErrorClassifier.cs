namespace Allocator.Storage.SqlServer.Internal;

/// <summary>What a SQL Server error means to the store. Decided by error number and severity, never by message text.</summary>
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

    /// <summary>
    /// 50408 (raised by the scripts): the statement ran past its time budget
    /// (<see cref="SqlServerWorkerStore.StatementTimeout"/>) and rolled back instead of committing:
    /// nothing was written. SQL Server's stand-in for PostgreSQL's statement_timeout.
    /// </summary>
    StatementTimeout,

    /// <summary>-2: the client gave up (command timeout). The outcome is unknown; a retry with the same idempotency key resolves it.</summary>
    ClientTimeout,

    /// <summary>
    /// 10053, 10054, 10060, 64, 121, 233, or any error of severity 20 or more (fatal: the server
    /// or the transport closed the connection; managed SNI on Linux reports a broken socket as
    /// number 0, severity 20) while the command may have run: the outcome is unknown; the caller
    /// retries with the same key.
    /// </summary>
    ConnectionLost,

    /// <summary>
    /// Opening the connection failed (refused, reset during the handshake, a transient login error
    /// such as 4060 while a database recovers, the wait for a pooled connection timed out): no
    /// statement was sent, nothing was written, and opening again is safe.
    /// </summary>
    ConnectionRejected,

    /// <summary>18456, 18488, 1346 and the other login refusals: the credentials or the login are wrong. Nothing was sent; opening again would fail alike.</summary>
    LoginFailed,

    /// <summary>50404 (raised by the scripts): the pool does not exist; 547 (a foreign key to pools): it was removed meanwhile.</summary>
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
    public const int ForeignKeyViolationNumber = 547;
    public const int StatementTimeoutNumber = 50408;
    public const int StrategyChangedNumber = 50412;

    /// <summary>Errors of this severity or above close the connection (SQL Server's "fatal" range, 20–25).</summary>
    public const byte FatalSeverity = 20;

    /// <summary>
    /// Login refusals that a second attempt would repeat: login failed (18456), password expired
    /// (18488, 18487), untrusted domain (18452), login disabled (18470), account locked (18486),
    /// impersonation failed (1346). SqlClient's own connect loop stops on 18456, 18488 and 1346 too.
    /// </summary>
    private static readonly HashSet<int> LoginRefusals = [18456, 18488, 18487, 18452, 18470, 18486, 1346];

    public static SqlServerErrorKind Classify(int number) => number switch
    {
        UniqueConstraintViolation or UniqueIndexViolation => SqlServerErrorKind.DuplicateKey,
        DeadlockVictim => SqlServerErrorKind.Deadlock,
        LockRequestTimeout => SqlServerErrorKind.LockTimeout,
        ClientTimeoutNumber => SqlServerErrorKind.ClientTimeout,
        PoolNotFoundNumber => SqlServerErrorKind.PoolNotFound,
        // 547: the only foreign keys the scripts can violate point at pools: a worker registered
        // into a pool that a move removed between the script's check and its insert (issue 23).
        ForeignKeyViolationNumber => SqlServerErrorKind.PoolNotFound,
        StatementTimeoutNumber => SqlServerErrorKind.StatementTimeout,
        StrategyChangedNumber => SqlServerErrorKind.StrategyChanged,
        10053 or 10054 or 10060 or 64 or 121 or 233 => SqlServerErrorKind.ConnectionLost,
        _ => SqlServerErrorKind.Other,
    };

    /// <summary>
    /// Classifies an error raised while a command ran, from its numbers (<c>SqlException.Number</c>
    /// first, then each <c>SqlError.Number</c>): the first number the store knows wins, so a known
    /// error reported after an informational one is still recognised. Failing that, a fatal
    /// <paramref name="severity"/> (the highest <c>SqlError.Class</c>) means the connection is gone.
    /// </summary>
    public static SqlServerErrorKind Classify(IEnumerable<int> numbers, byte severity = 0)
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

        return severity >= FatalSeverity ? SqlServerErrorKind.ConnectionLost : SqlServerErrorKind.Other;
    }

    /// <summary>
    /// Classifies a failure of <c>SqlConnection.OpenAsync</c>, where nothing of the store's was
    /// sent yet: a login refusal (<see cref="SqlServerErrorKind.LoginFailed"/>), else
    /// <see cref="SqlServerErrorKind.ConnectionRejected"/>. Only the numbers are needed: every
    /// SqlException of an open is about the connection, whatever its number (a refused socket is
    /// number 0 on Linux).
    /// </summary>
    public static SqlServerErrorKind ClassifyOpen(IEnumerable<int> numbers)
    {
        ArgumentNullException.ThrowIfNull(numbers);
        return numbers.Any(LoginRefusals.Contains) ? SqlServerErrorKind.LoginFailed : SqlServerErrorKind.ConnectionRejected;
    }

    /// <summary>Whether re-running the whole transaction is safe and useful.</summary>
    public static bool IsRetryable(SqlServerErrorKind kind) => kind is SqlServerErrorKind.Deadlock or SqlServerErrorKind.DuplicateKey;
}
