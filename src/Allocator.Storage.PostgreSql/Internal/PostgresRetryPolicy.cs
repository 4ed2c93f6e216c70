using System.Diagnostics;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// The store's retry policy: which errors re-run a statement (classified by
/// <see cref="PostgresErrorClassifier"/>), how often, after what pause, and what the rest become.
/// </summary>
/// <param name="poolNotFound">Told the pool a statement found missing (drops its cached settings).</param>
/// <remarks>
/// A deadlock, serialization failure, lock timeout, a connection that could not be made (and,
/// where the operation is idempotent on retry, a unique violation) runs the statement again,
/// fresh, after a jitter: the failed one rolled back as a whole or never ran, so nothing is
/// applied twice. A broken or timed-out connection during a statement is "unavailable, outcome
/// unknown" (<see cref="AllocatorException.OutcomeUnknown"/>); a statement timeout is
/// "unavailable, nothing written"; the caller's own cancellation stays a cancellation.
/// Each attempt runs under a <see cref="StatementDeadline"/>: the command timeout, and every
/// cancel of a running statement, off the shared thread pool.
/// </remarks>
internal sealed class PostgresRetryPolicy(PostgresWorkerStoreOptions options, TimeProvider time, Action<string> poolNotFound)
{
    private const string ConnectionLostMessage =
        "The database connection failed or timed out during the statement; its outcome is unknown. Retry with the same idempotency key.";

    public async Task<T> RunAsync<T>(Func<CancellationToken, Task<T>> operation, bool duplicateKeyIsTransient, CancellationToken cancellationToken, string? poolId = null)
    {
        for (var attempt = 0; ; attempt++)
        {
            cancellationToken.ThrowIfCancellationRequested();
            // On the real clock, as the driver's timeout it replaces: a test's fake clock, moved
            // to expire leases, must not cut statements short.
            using var deadline = new StatementDeadline(options.CommandTimeout, TimeProvider.System, cancellationToken);
            try
            {
                return await operation(deadline.Token);
            }
            catch (OperationCanceledException ex) when (deadline.Expired && !cancellationToken.IsCancellationRequested)
            {
                // The command timeout, as the driver's own used to report it: the statement was
                // sent and not answered in time, so it may have run.
                throw new AllocatorException(AllocatorErrorKind.Unavailable, ConnectionLostMessage, outcomeUnknown: true, ex);
            }
            catch (Exception ex) when (ex is NpgsqlException or TimeoutException or IOException)
            {
                if (cancellationToken.IsCancellationRequested && ex is not PostgresException)
                {
                    // The caller gave up while the driver failed (its deadline met the command
                    // timeout, a partition): the statement may have run. Never a raw driver error (a 500).
                    throw new AllocatorException(AllocatorErrorKind.Unavailable,
                        "The call was cancelled while its database connection failed; its outcome is unknown. Retry with the same idempotency key.", outcomeUnknown: true, ex);
                }

                var kind = PostgresErrorClassifier.Classify(ex);
                var sqlState = (ex as PostgresException)?.SqlState;
                if (kind == PostgresErrorKind.PoolNotFound && poolId is not null)
                {
                    poolNotFound(poolId);
                    throw AllocatorException.PoolNotFound(poolId);
                }

                if (kind == PostgresErrorKind.QueryCanceled)
                {
                    // Not the caller's cancellation: the server's statement_timeout, inside the
                    // command timeout, cancelled the statement, which rolled back.
                    throw new AllocatorException(AllocatorErrorKind.Unavailable, "The statement timed out; nothing was written.", outcomeUnknown: false, ex);
                }

                if (kind == PostgresErrorKind.ConnectionLost)
                {
                    // The statement may have committed before the connection broke (#2): the caller
                    // retries with the same idempotency key, which finds what committed.
                    throw new AllocatorException(AllocatorErrorKind.Unavailable, ConnectionLostMessage, outcomeUnknown: true, ex);
                }

                if (!PostgresErrorClassifier.IsTransient(kind, duplicateKeyIsTransient))
                {
                    throw;
                }

                if (attempt >= options.TransientRetries)
                {
                    throw new AllocatorException(AllocatorErrorKind.Unavailable,
                        $"Gave up after {attempt + 1} attempts ({sqlState ?? kind.ToString()}); nothing was written.", outcomeUnknown: false, ex);
                }

                Activity.Current?.AddEvent(new ActivityEvent("allocator.retry", tags: new ActivityTagsCollection { ["db.response.status_code"] = sqlState ?? kind.ToString(), ["attempt"] = attempt + 1 }));
                await Task.Delay(Jitter(), time, cancellationToken);
            }
        }
    }

    /// <summary>A random pause up to <see cref="PostgresWorkerStoreOptions.RetryJitter"/>, so retries of colliding statements spread out.</summary>
    public TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * options.RetryJitter.Ticks));
}
