using System.Net;
using System.Net.NetworkInformation;
using Allocator.Networking;
using Allocator.Testing;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>Allocator:Cluster:SiloListenPort</c> (a silo reached through a forward at the port it
/// advertises) and <c>BindOutgoingToAdvertisedAddress</c> (its outgoing silo connections leave
/// from its own address): what lets the silo-partition fault scenario cut one silo off (issue 47).
/// </summary>
public sealed class SiloNetworkTests
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task TwoSilos_OneBehindAForward_TheOtherDialsItThere_FromItsOwnAddress()
    {
        var addressA = IPAddress.Parse("127.0.0.21");
        var addressB = IPAddress.Parse("127.0.0.22");
        var listenB = FreePort.Next(addressB);
        await using var forward = PartitionProxy.Start(new IPEndPoint(addressB, listenB), new IPEndPoint(addressB, FreePort.Next(addressB)));
        var siloA = new IPEndPoint(addressA, FreePort.Next(addressA));
        var run = Guid.NewGuid().ToString("N")[..10];
        string[] cluster =
        [
            $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
            "--Allocator:Cluster:Membership=postgres",
            $"--Allocator:Cluster:ClusterId=test-{run}",
            $"--Allocator:Cluster:MembershipSchema=cluster_{run}",
            "--Allocator:Cluster:BindOutgoingToAdvertisedAddress=true",
        ];

        // B first: A, joining, dials B at the port B advertises (the forward's), from A's address.
        await using var b = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:AdvertisedAddress={addressB}", $"--Allocator:Cluster:SiloPort={forward.EndPoint.Port}", $"--Allocator:Cluster:SiloListenPort={listenB}"]);
        await using var a = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:AdvertisedAddress={addressA}", $"--Allocator:Cluster:SiloPort={siloA.Port}"]);

        // Orleans sends both ways on one connection; whichever side opened one, it left from that side's address.
        IPAddress[] From(IPEndPoint silo) =>
            [.. IPGlobalProperties.GetIPGlobalProperties().GetActiveTcpConnections()
                .Where(c => c.State == TcpState.Established && c.RemoteEndPoint.Equals(silo))
                .Select(c => c.LocalEndPoint.Address)];
        await MultiInstanceTests.UntilAsync(() => Task.FromResult(From(forward.EndPoint).Length > 0), Limit, "A to connect to B");

        forward.Accepted.Should().BeGreaterThan(0, "A reaches B at the port B advertises, the forward's, and B listens behind it");
        From(forward.EndPoint).Should().AllSatisfy(x => x.Should().Be(addressA), "A's connections leave from A's address");
        From(siloA).Where(x => !x.Equals(addressB)).Should().BeEmpty("B's connections, if any, leave from B's address");
    }

    [Fact]
    public async Task BindOutgoing_WithTheAnyAddress_FailsTheStart_NamingTheSetting()
    {
        var start = () => TestHost.StartAsync(["--Allocator:Cluster:AdvertisedAddress=0.0.0.0", "--Allocator:Cluster:BindOutgoingToAdvertisedAddress=true"]);

        (await start.Should().ThrowAsync<InvalidOperationException>()).Which.Message.Should().Contain("BindOutgoingToAdvertisedAddress");
    }
}
