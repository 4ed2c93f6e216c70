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
    }
}
