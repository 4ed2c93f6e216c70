namespace Allocator.Storage.PostgreSql.Tests;

public sealed class ErrorClassificationTests
{
    [Theory]
    [InlineData("23505", "UniqueViolation")]
    [InlineData("40P01", "Deadlock")]
    [InlineData("40001", "SerializationFailure")]
    [InlineData("55P03", "LockTimeout")]
    [InlineData("57014", "QueryCanceled")]
    [InlineData("P0002", "PoolNotFound")]
    [InlineData("42P01", "Other")]
    [InlineData(null, "Other")]
    public void Classify_BySqlState(string? sqlState, string expected) =>
        PostgresErrors.Classify(sqlState).Should().Be(Enum.Parse<PostgresErrorKind>(expected));

    [Fact]
    public void Classify_IgnoresMessageText() =>
        PostgresErrors.Classify(new Npgsql.PostgresException("deadlock detected", "ERROR", "ERROR", "XX000")).Should().Be(PostgresErrorKind.Other);

    [Theory]
    [InlineData("Deadlock", false, true)]
    [InlineData("SerializationFailure", false, true)]
    [InlineData("LockTimeout", false, true)]
    [InlineData("UniqueViolation", false, false)]
    [InlineData("UniqueViolation", true, true)]
    [InlineData("QueryCanceled", true, false)]
    [InlineData("Other", true, false)]
    public void IsTransient(string kind, bool uniqueIsTransient, bool expected) =>
        PostgresErrors.IsTransient(Enum.Parse<PostgresErrorKind>(kind), uniqueIsTransient).Should().Be(expected);
}
