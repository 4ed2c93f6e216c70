namespace Allocator.Storage.PostgreSql.Tests;

public sealed class OptionsTests
{
    [Fact]
    public void Defaults_AreValid_AndTimeoutsNest()
    {
        var options = new PostgresWorkerStoreOptions { ConnectionString = "Host=127.0.0.1" };
        options.Validate().Should().BeEmpty();
        options.Schema.Should().Be("allocator");
        options.LockTimeout.Should().Be(TimeSpan.FromSeconds(2));
        options.CommandTimeout.Should().BeGreaterThan(options.LockTimeout);
        options.SkipRetries.Should().Be(2);
    }

    [Fact]
    public void CommandTimeoutNotAboveLockTimeout_IsRejected()
    {
        var options = new PostgresWorkerStoreOptions { ConnectionString = "Host=127.0.0.1", LockTimeout = TimeSpan.FromSeconds(30), CommandTimeout = TimeSpan.FromSeconds(30) };
        options.Validate().Should().ContainSingle().Which.Should().Contain("nest");
        options.Invoking(o => o.EnsureValid()).Should().Throw<ArgumentException>().WithMessage("*nest*");
    }

    [Fact]
    public void NegativeRetries_AreRejected()
    {
        var options = new PostgresWorkerStoreOptions { ConnectionString = "Host=127.0.0.1", SkipRetries = -1 };
        options.Validate().Should().ContainSingle().Which.Should().Contain("SkipRetries");
    }

    [Fact]
    public void NoConnectionStringNorDataSource_IsRejected_NamingTheSetting() =>
        new PostgresWorkerStoreOptions().Validate().Should().ContainSingle().Which.Should().Contain("ConnectionStrings:Allocator");

    [Theory]
    [InlineData("allocator", "\"allocator\"")]
    [InlineData("t_abc123", "\"t_abc123\"")]
    public void SchemaName_IsQuoted(string schema, string quoted) => SchemaName.Quote(schema).Should().Be(quoted);
}
