namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>How the store reports its server's replication (issue 48): what <c>/health</c> shows and the start-up warns about.</summary>
public sealed class ReplicationTests : PostgresStoreTestBase
{
    [Fact]
    public async Task ReadReplication_ServerWithoutStandby_SaysNone()
    {
        var replication = await Store.ReadReplicationAsync();

        replication.Mode.Should().Be(ReplicationMode.None, "the tests' server has no standby");
        replication.Name.Should().Be("none");
        replication.Standbys.Should().BeEmpty();
    }

    [Theory]
    [InlineData("on", "standby", "sync", ReplicationMode.Synchronous, "")]
    [InlineData("on", "ANY 1 (a, b)", "quorum", ReplicationMode.Synchronous, "")]
    [InlineData("remote_apply", "standby", "sync", ReplicationMode.Synchronous, "")]
    [InlineData("on", "", "async", ReplicationMode.Asynchronous, "standby")]
    [InlineData("on", "other", "async", ReplicationMode.Asynchronous, "standby")]
    [InlineData("local", "standby", "sync", ReplicationMode.Asynchronous, "standby")]
    [InlineData("off", "standby", "sync", ReplicationMode.Asynchronous, "standby")]
    [InlineData("on", "standby", null, ReplicationMode.Synchronous, "")]
    [InlineData("on", "", null, ReplicationMode.Asynchronous, "standby")]
    public void Interpret_OneStandby_IsSynchronousOnlyWhenCommitsWaitForIt(string commit, string names, string? state, ReplicationMode expected, string asynchronous)
    {
        var replication = PostgresReplication.Interpret(commit, names, [("standby", state)]);

        replication.Mode.Should().Be(expected);
        string.Join(",", replication.AsynchronousStandbys).Should().Be(asynchronous);
    }

    [Fact]
    public void Interpret_OneSynchronousAndOneAsynchronousStandby_IsSynchronous_AndNamesTheOther()
    {
        var replication = PostgresReplication.Interpret("on", "a", [("a", "sync"), ("b", "async")]);

        replication.Mode.Should().Be(ReplicationMode.Synchronous, "every commit waits for a: a failover to it loses nothing");
        replication.AsynchronousStandbys.Should().Equal("b");
        replication.Standbys.Should().Equal("a (sync)", "b (async)");
    }

    [Fact]
    public void Interpret_NoStandby_IsNone_EvenWhenCommitsWouldWait()
    {
        PostgresReplication.Interpret("on", "standby", []).Mode.Should().Be(ReplicationMode.None);
    }
}
