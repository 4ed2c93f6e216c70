using System.Diagnostics;
using Allocator.Telemetry;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// The store's retry policy: runs one script on a fresh connection, re-runs a whole transaction
/// the engine rolled back (<see cref="SqlServerErrorClassifier.IsRetryable"/>) after a jitter, and
/// translates the rest into domain errors. One span per attempt.
/// </summary>
internal sealed class SqlServerRetryPolicy(Func<CancellationToken, Task<SqlConnection>> open, SqlServerCommandFactory commands, SqlServerWorkerStoreOptions options, TimeProvider time)
{
    public async Task<T> RunAsync<T>(string? poolId, Func<SqlCommand> build, Func<SqlDataReader, CancellationToken, Task<T>> read, CancellationToken cancellationToken)
    {
        for (var attempt = 0; ; attempt++)
        {
            await using var command = build();
            var operation = commands.Scripts.NameOf(command.CommandText);
            using var activity = AllocatorTelemetry.ActivitySource.StartActivity("sqlserver " + operation, ActivityKind.Client);
            if (activity is not null)
            {
                // Database semantic conventions; the statement text is the embedded script (no values in it).
                activity.SetTag("db.system.name", "microsoft.sql_server");
                activity.SetTag("db.operation.name", operation);
                activity.SetTag(AllocatorTelemetry.Tags.Store, "sqlserver");
                activity.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
                activity.SetTag(AllocatorTelemetry.Tags.Retries, attempt);
            }

            try
            {
                await using var connection = await open(cancellationToken);
                command.Connection = connection;
                await using var reader = await command.ExecuteReaderAsync(cancellationToken);
                var result = await read(reader, cancellationToken);

                // Drain the rest so an error raised after the last result read still surfaces here.
                while (await reader.NextResultAsync(cancellationToken))
                {
                }

                return result;
            }
            catch (SqlException ex)
            {
                var kind = SqlServerErrorClassifier.Classify(Numbers(ex));
                activity?.SetTag("db.response.status_code", ex.Number.ToString(System.Globalization.CultureInfo.InvariantCulture));
                activity?.SetStatus(ActivityStatusCode.Error, kind.ToString());
                if (SqlServerErrorClassifier.IsRetryable(kind) && attempt < options.TransactionRetries)
                {
                    // Deadlock victim or beaten to a unique key: the transaction was rolled back
                    // whole, so re-run it whole. A duplicate session key then reads the existing row.
                    await Task.Delay(Jitter(), time, cancellationToken);
                    continue;
                }

                throw Translate(kind, ex, poolId, options);
            }
        }
    }

    internal static IEnumerable<int> Numbers(SqlException exception)
    {
        yield return exception.Number;
        foreach (SqlError error in exception.Errors)
        {
            yield return error.Number;
        }
    }

    internal static Exception Translate(SqlServerErrorKind kind, Exception exception, string? poolId, SqlServerWorkerStoreOptions options) => kind switch
    {
        SqlServerErrorKind.PoolNotFound => AllocatorException.PoolNotFound(poolId ?? "?"),
        SqlServerErrorKind.StrategyChanged => new StrategyChangedException(exception),
        SqlServerErrorKind.LockTimeout => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"Timed out after {options.LockTimeout.TotalMilliseconds:0} ms waiting for a row lock; nothing was written.", outcomeUnknown: false, exception),
        SqlServerErrorKind.ClientTimeout => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"The command timed out on the client after {options.CommandTimeout.TotalSeconds:0} s; its outcome is unknown. " +
            "Retrying with the same session key returns the allocation if one was made.", outcomeUnknown: true, exception),
        SqlServerErrorKind.ConnectionLost => new AllocatorException(AllocatorErrorKind.Unavailable,
            "The connection to SQL Server broke during the command; its outcome is unknown. " +
            "Retrying with the same session key returns the allocation if one was made.", outcomeUnknown: true, exception),
        SqlServerErrorKind.Deadlock or SqlServerErrorKind.DuplicateKey => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"The transaction was rolled back {options.TransactionRetries + 1} times ({kind}); nothing was written.", exception),
        _ => exception,
    };

    public TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * options.RetryJitter.Ticks));
}
