using Allocator.Host.Options;
using Microsoft.Extensions.Configuration;
using Npgsql;

namespace Allocator.Host.Tests;

/// <summary>A connection string naming a primary and its standbys rechecks host states after 1 s (issue 48).</summary>
public sealed class FailoverDefaultsTests
{
    [Theory]
    [InlineData("Host=127.0.0.1:5432,127.0.0.1:5433;Username=postgres;Database=allocator;Target Session Attributes=primary")]
    [InlineData("Host=a,b;Port=5432;Database=allocator;")]
    public void SeveralHosts_RecheckAfterOneSecond(string connectionString)
    {
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["ConnectionStrings:Allocator"] = connectionString,
            ["Allocator:Databases:second"] = connectionString,
        }).Build();

        var databases = ConfiguredDatabases.Read(configuration);

        databases.All.Should().HaveCount(2);
        foreach (var (_, read) in databases.All)
        {
            new NpgsqlConnectionStringBuilder(read).HostRecheckSeconds.Should().Be(1);
        }
    }

    [Theory]
    [InlineData("Host=127.0.0.1;Port=5432;Database=allocator", "one host: nothing to recheck")]
    [InlineData("Host=a,b;Database=allocator;Host Recheck Seconds=30", "set by the operator")]
    [InlineData("Host=a,b;Database=allocator;HostRecheckSeconds=30", "set by the operator, spelled without spaces")]
    [InlineData("Server=127.0.0.1,1433;User Id=sa;TrustServerCertificate=true", "SQL Server's port after a comma is not a second host")]
    public void OtherwiseTheStringIsKept(string connectionString, string because)
    {
        ConfiguredDatabases.WithFailoverDefaults(connectionString).Should().Be(connectionString, because);
    }
}
