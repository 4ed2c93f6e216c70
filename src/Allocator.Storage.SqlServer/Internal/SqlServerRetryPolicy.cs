using System.Diagnostics;
using Allocator.Telemetry;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// The store's retry policy: opens a connection (again, after a failure that sent nothing),
/// runs one script on it, re-runs a whole transaction the engine rolled back
/// (<see cref="SqlServerErrorClassifier.IsRetryable"/>) after a jitter, and translates the rest
/// into domain errors. One span per attempt.
/// </summary>
/// <remarks>
/// Opening and running are told apart on purpose: a failure to open sent nothing, so it is
/// "unavailable, nothing written" and may be tried again, whatever SqlClient's number for it (a
/// refused socket is number 0, a login timeout −2); a failure once the command was sent may have
/// committed (<see cref="AllocatorException.OutcomeUnknown"/>) and is never re-run here.
/// </remarks>
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

            SqlConnection connection;
            try
            {
                connection = await OpenAsync(cancellationToken);
            }
            catch (AllocatorException ex) when (activity is not null)
            {
                activity.SetStatus(ActivityStatusCode.Error, ex.Message);
                throw;
            }

            await using var opened = connection;
            try
            {
                command.Connection = connection;
                await using var reader = await command.ExecuteReaderAsync(cancellationToken);
                var result = await read(reader, cancellationToken);

                // Drain the rest so an error raised after the last result read still surfaces here.
                while (await reader.NextResultAsync(cancellationToken))
                {
                }

                return result;
            }
            catch (SqlException ex) when (cancellationToken.IsCancellationRequested)
            {
                // The caller's own cancellation (SqlClient reports it as "operation cancelled by
                // user") stays a cancellation.
                activity?.SetStatus(ActivityStatusCode.Error, "cancelled");
                throw new OperationCanceledException("The caller cancelled the command.", ex, cancellationToken);
            }
            catch (SqlException ex)
            {
                var kind = SqlServerErrorClassifier.Classify(Numbers(ex), Severity(ex));
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

    /// <summary>
    /// Opens a connection. A failure that sent nothing (<see cref="SqlServerErrorKind.ConnectionRejected"/>)
    /// is tried again up to <see cref="SqlServerWorkerStoreOptions.OpenRetries"/> times after
    /// <see cref="OpenRetryDelay"/>; every attempt together is bounded by the command timeout, so
    /// opening never outlives the caller by more than one command. What is left is
    /// <see cref="AllocatorErrorKind.Unavailable"/> with nothing written.
    /// </summary>
    public async Task<SqlConnection> OpenAsync(CancellationToken cancellationToken)
    {
        using var budget = new CancellationTokenSource(options.CommandTimeout, time);
        using var linked = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, budget.Token);
        for (var attempt = 0; ; attempt++)
        {
            Exception failure;
            SqlServerErrorKind kind;
            try
            {
                return await open(linked.Token);
            }
            catch (Exception ex) when (cancellationToken.IsCancellationRequested && ex is not OperationCanceledException)
            {
                throw new OperationCanceledException("The caller cancelled while a connection was opened.", ex, cancellationToken);
            }
            catch (Exception ex) when (!cancellationToken.IsCancellationRequested && ClassifyOpen(ex, budget.IsCancellationRequested) is not SqlServerErrorKind.Other)
            {
                failure = ex;
                kind = ClassifyOpen(ex, budget.IsCancellationRequested);
            }

            if (kind == SqlServerErrorKind.ConnectionRejected && attempt < options.OpenRetries && !budget.IsCancellationRequested)
            {
                Activity.Current?.AddEvent(new ActivityEvent("allocator.retry", tags: new ActivityTagsCollection
                {
                    ["db.response.status_code"] = (failure as SqlException)?.Number.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? failure.GetType().Name,
                    ["attempt"] = attempt + 1,
                }));
                try
                {
                    await Task.Delay(OpenRetryDelay(attempt), time, linked.Token);
                    continue;
                }
                catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
                {
                    // The budget ran out during the pause: answer with the last failure.
                }
            }

            throw TranslateOpen(kind, failure, attempt + 1, options);
        }
    }

    /// <summary>
    /// What a failure of <c>OpenAsync</c> is: <see cref="SqlServerErrorKind.Other"/> (a programming
    /// or setup error, rethrown as it is, e.g. globalization-invariant mode), a login refusal, or a
    /// rejected connection (any other SqlException; the wait for a pooled connection timing out,
    /// which SqlClient reports as InvalidOperationException; the open budget running out).
    /// </summary>
    internal static SqlServerErrorKind ClassifyOpen(Exception exception, bool budgetExpired) => exception switch
    {
        SqlException sql => SqlServerErrorClassifier.ClassifyOpen(Numbers(sql)),
        OperationCanceledException when budgetExpired => SqlServerErrorKind.ConnectionRejected,
        InvalidOperationException => SqlServerErrorKind.ConnectionRejected,
        _ => SqlServerErrorKind.Other,
    };

    /// <summary>The pause before the next open: <see cref="SqlServerWorkerStoreOptions.OpenRetryDelay"/> doubled per attempt, plus a jitter.</summary>
    internal TimeSpan OpenRetryDelay(int attempt) =>
        TimeSpan.FromTicks(options.OpenRetryDelay.Ticks * (1L << Math.Min(attempt, 10))) + Jitter();

    internal static IEnumerable<int> Numbers(SqlException exception)
    {
        yield return exception.Number;
        foreach (SqlError error in exception.Errors)
        {
            yield return error.Number;
        }
    }

    /// <summary>The highest severity (class) among the exception's errors.</summary>
    internal static byte Severity(SqlException exception)
    {
        var severity = exception.Class;
        foreach (SqlError error in exception.Errors)
        {
            severity = Math.Max(severity, error.Class);
        }

        return severity;
    }

    internal static Exception Translate(SqlServerErrorKind kind, Exception exception, string? poolId, SqlServerWorkerStoreOptions options) => kind switch
    {
        SqlServerErrorKind.PoolNotFound => AllocatorException.PoolNotFound(poolId ?? "?"),
        SqlServerErrorKind.StrategyChanged => new StrategyChangedException(exception),
        SqlServerErrorKind.LockTimeout => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"Timed out after {options.LockTimeout.TotalMilliseconds:0} ms waiting for a row lock; nothing was written.", outcomeUnknown: false, exception),
        SqlServerErrorKind.StatementTimeout => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"The statement ran past its {SqlServerWorkerStore.StatementTimeout(options).TotalMilliseconds:0} ms budget and rolled back; nothing was written.", outcomeUnknown: false, exception),
        SqlServerErrorKind.ClientTimeout => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"The command timed out on the client after {options.CommandTimeout.TotalSeconds:0} s; its outcome is unknown. " +
            "Retrying with the same session key returns the allocation if one was made.", outcomeUnknown: true, exception),
        SqlServerErrorKind.ConnectionLost => new AllocatorException(AllocatorErrorKind.Unavailable,
            "The connection to SQL Server broke during the command; its outcome is unknown. " +
            "Retrying with the same session key returns the allocation if one was made.", outcomeUnknown: true, exception),
        SqlServerErrorKind.Deadlock or SqlServerErrorKind.DuplicateKey => new AllocatorException(AllocatorErrorKind.Unavailable,
            $"The transaction was rolled back {options.TransactionRetries + 1} times ({kind}); nothing was written.", exception),
        SqlServerErrorKind.ConnectionRejected or SqlServerErrorKind.LoginFailed => TranslateOpen(kind, exception, 1, options),
        _ => exception,
    };

    /// <summary>A connection that could not be opened: unavailable, nothing was sent, so nothing was written.</summary>
    internal static AllocatorException TranslateOpen(SqlServerErrorKind kind, Exception exception, int attempts, SqlServerWorkerStoreOptions options)
    {
        var number = exception is SqlException sql ? $" (error {sql.Number})" : "";
        return kind == SqlServerErrorKind.LoginFailed
            ? new AllocatorException(AllocatorErrorKind.Unavailable,
                $"SQL Server refused the login{number}: check {SqlServerWorkerStoreOptions.ConnectionStringSetting}. Nothing was sent.", outcomeUnknown: false, exception)
            : new AllocatorException(AllocatorErrorKind.Unavailable,
                $"Could not open a connection to SQL Server{number} in {attempts} attempt(s) within {options.CommandTimeout.TotalSeconds:0} s; " +
                "nothing was sent, so nothing was written. Retrying is safe.", outcomeUnknown: false, exception);
    }

    public TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * options.RetryJitter.Ticks));
}
