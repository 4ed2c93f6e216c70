using System.Diagnostics;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// The store's retry policy: which errors re-run a statement (classified by
/// <see cref="PostgresErrorClassifier"/>), how often, after what pause, and what the rest become.
/// </summary>
/// <param name="poolNotFound">Told the pool a statement found missing (drops its cached settings).</param>
internal sealed class PostgresRetryPolicy(PostgresWorkerStoreOptions options, TimeProvider time, Action<string> poolNotFound)
{
    /// <summary>
    /// Runs one statement; on a deadlock, serialization failure, lock timeout (and, where the
    /// operation is idempotent on retry, a unique violation) runs it again as a fresh statement
    /// after a jitter. The failed statement rolled back as a whole, so nothing is applied twice.
    /// </summary>
    public async Task<T> RunAsync<T>(Func<CancellationToken, Task<T>> operation, bool duplicateKeyIsTransient, CancellationToken cancellationToken, string? poolId = null)
    {
        for (var attempt = 0; ; attempt++)
        {
            try
            {
                return await operation(cancellationToken);
            }
            catch (PostgresException ex)
            {
                var kind = PostgresErrorClassifier.Classify(ex.SqlState);
                if (kind == PostgresErrorKind.PoolNotFound && poolId is not null)
                {
                    poolNotFound(poolId);
                    throw AllocatorException.PoolNotFound(poolId);
                }

                if (kind == PostgresErrorKind.QueryCanceled)
                {
                    cancellationToken.ThrowIfCancellationRequested();
                    throw new AllocatorException(AllocatorErrorKind.Unavailable, "The statement timed out.", ex);
                }

                if (!PostgresErrorClassifier.IsTransient(kind, duplicateKeyIsTransient))
                {
                    throw;
                }

                if (attempt >= options.TransientRetries)
                {
                    throw new AllocatorException(AllocatorErrorKind.Unavailable,
                        $"Gave up after {attempt + 1} attempts (SQLSTATE {ex.SqlState}); nothing was written.", ex);
                }

                Activity.Current?.AddEvent(new ActivityEvent("allocator.retry", tags: new ActivityTagsCollection { ["db.response.status_code"] = ex.SqlState, ["attempt"] = attempt + 1 }));
                await Task.Delay(Jitter(), time, cancellationToken);
            }
        }
    }

    /// <summary>A random pause up to <see cref="PostgresWorkerStoreOptions.RetryJitter"/>, so retries of colliding statements spread out.</summary>
    public TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * options.RetryJitter.Ticks));
}
