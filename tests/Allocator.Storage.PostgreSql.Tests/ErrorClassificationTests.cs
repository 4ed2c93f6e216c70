namespace Allocator.Storage.PostgreSql.Tests;

public sealed class ErrorClassificationTests
{
    [Theory]
    [InlineData("23505", "DuplicateKey")]
    [InlineData("40P01", "Deadlock")]
    [InlineData("40001", "SerializationFailure")]
    [InlineData("55P03", "LockTimeout")]
    [InlineData("57014", "QueryCanceled")]
    [InlineData("P0002", "PoolNotFound")]
    [InlineData("42P01", "Other")]
    [InlineData(null, "Other")]
    public void Classify_BySqlState(string? sqlState, string expected) =>
        PostgresErrorClassifier.Classify(sqlState).Should().Be(Enum.Parse<PostgresErrorKind>(expected));

    [Fact]
    public void Classify_IgnoresMessageText() =>
        PostgresErrorClassifier.Classify(new Npgsql.PostgresException("deadlock detected", "ERROR", "ERROR", "XX000")).Should().Be(PostgresErrorKind.Other);

    [Theory]
    [InlineData("RevalidateCachedQuery", "PreparedStatementStale")]
    [InlineData("exec_stmt_raise", "Other")]
    public void Classify_FeatureNotSupported_IsAStaleStatementOnlyFromThePlanCache(string routine, string expected) =>
        PostgresErrorClassifier.Classify(new Npgsql.PostgresException("cached plan must not change result type", "ERROR", "ERROR", "0A000", routine: routine))
            .Should().Be(Enum.Parse<PostgresErrorKind>(expected));

    [Theory]
    [InlineData("PreparedStatementStale", false, true)]
    [InlineData("Deadlock", false, true)]
    [InlineData("SerializationFailure", false, true)]
    [InlineData("LockTimeout", false, true)]
    [InlineData("DuplicateKey", false, false)]
    [InlineData("DuplicateKey", true, true)]
    [InlineData("QueryCanceled", true, false)]
    [InlineData("Other", true, false)]
    public void IsTransient(string kind, bool uniqueIsTransient, bool expected) =>
        PostgresErrorClassifier.IsTransient(Enum.Parse<PostgresErrorKind>(kind), uniqueIsTransient).Should().Be(expected);

    [Fact]
    public async Task RetryPolicy_DriverErrorAfterTheCallerCancelled_IsOutcomeUnknown_NotARawError()
    {
        // A renew whose request timeout met its command timeout during a partition leaked the
        // raw NpgsqlException (a 500): the policy translated driver errors only while the
        // caller's token was not cancelled (db-partition fault scenario).
        var policy = new Internal.PostgresRetryPolicy(new PostgresWorkerStoreOptions(), TimeProvider.System, _ => { });
        using var caller = new CancellationTokenSource();

        var error = (await FluentActions.Awaiting(() => policy.RunAsync<int>(async _ =>
        {
            await caller.CancelAsync();
            throw new Npgsql.NpgsqlException("Exception while reading from stream", new TimeoutException());
        }, duplicateKeyIsTransient: false, caller.Token)).Should().ThrowAsync<AllocatorException>()).Which;

        error.Kind.Should().Be(AllocatorErrorKind.Unavailable);
        error.OutcomeUnknown.Should().BeTrue();
    }
}
