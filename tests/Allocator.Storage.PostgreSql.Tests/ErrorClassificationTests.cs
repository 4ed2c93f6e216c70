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
    [InlineData("Deadlock", false, true)]
    [InlineData("SerializationFailure", false, true)]
    [InlineData("LockTimeout", false, true)]
    [InlineData("DuplicateKey", false, false)]
    [InlineData("DuplicateKey", true, true)]
    [InlineData("QueryCanceled", true, false)]
    [InlineData("Other", true, false)]
    public void IsTransient(string kind, bool uniqueIsTransient, bool expected) =>
        PostgresErrorClassifier.IsTransient(Enum.Parse<PostgresErrorKind>(kind), uniqueIsTransient).Should().Be(expected);
}
