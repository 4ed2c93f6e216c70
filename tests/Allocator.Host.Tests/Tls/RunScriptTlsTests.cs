using Allocator.Client;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Tls;

/// <summary><c>eng/run.sh --instances 2 --tls</c>: a local cluster over mutual TLS, as a user starts it.</summary>
public sealed class RunScriptTlsTests(ITestOutputHelper output)
{
    [Fact]
    public async Task RunShTls_TwoInstancesFormOneClusterOverTls_WithTheRunsThrowawayCertificate()
    {
        await using var cluster = await RunScript.StartAsync(instances: 2, output, tls: true);
        var clients = cluster.Urls.Select(url => new AllocatorClient(new HttpClient { BaseAddress = url, Timeout = TimeSpan.FromSeconds(30) }, cluster.Key)).ToList();
        var pool = "tls-run-" + Guid.NewGuid().ToString("N")[..10];
        await clients[0].PutPoolAsync(pool, new Client.PoolSettings());
        await clients[0].RegisterWorkersAsync(pool, [new WorkerBatchEntry("w1", "10.0.9.1:1", 10)]);

        (await clients[0].AllocateAsync(pool, new AllocateRequest(), "through-0")).Status.Should().Be(AllocateStatus.Allocated);
        (await clients[1].AllocateAsync(pool, new AllocateRequest(), "through-1")).Status.Should().Be(AllocateStatus.Allocated);
        var seen = await Task.WhenAll(clients.Select(c => c.GetPoolAsync(pool)));
        seen.Select(s => s.GrainSilo).Distinct().Should().ContainSingle("one grain for the pool, reached over the TLS silo port from the other instance");
        seen.Should().OnlyContain(s => s.ActiveAllocations == 2);

        foreach (var port in cluster.SiloPorts)
        {
            var probe = await SiloPortProbe.ConnectAsync(port);
            probe.Presented!.Subject.Should().Be("CN=allocator-local-cluster", "silo port {0} speaks TLS with the run's certificate", port);
            probe.Served.Should().BeFalse("a client without the run's certificate is cut off");
        }

        // A refused certificate is a warning: eng/run.sh shows it on the console while the
        // service runs (its logs go to a file), with the instance that logged it.
        using var rogueCa = TestCertificates.NewAuthority("Rogue CA");
        using var rogue = TestCertificates.NewSilo("rogue-client", rogueCa);
        (await SiloPortProbe.ConnectAsync(cluster.SiloPorts[1], rogue)).Served.Should().BeFalse();
        var warning = await cluster.WaitForStandardErrorAsync("Refused a silo connection: the peer's certificate CN=rogue-client", TimeSpan.FromSeconds(30));
        warning.Should().StartWith("instance 1 | ");
    }
}
