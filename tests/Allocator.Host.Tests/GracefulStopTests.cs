using System.Net;
using System.Net.Sockets;
using Allocator.Client;
using Allocator.Networking;

namespace Allocator.Host.Tests;

/// <summary>
/// The stop on SIGTERM (issue 21): readiness goes down while the listener still serves, then the
/// listener closes, the requests in flight finish with their outcome, and the pool grains move
/// to the other instances without their callers noticing.
/// </summary>
public sealed class GracefulStopTests
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task Stop_ReadinessGoesDownWhileTheListenerServes_ThenItCloses_AndAWaiterInFlightGetsItsAllocation()
    {
        await using var host = await TestHost.StartAsync(["--Allocator:Shutdown:DrainDelay=00:00:05"]);
        var pool = await MultiInstanceTests.NewPoolAsync(host, "stop-drain", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await host.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;
        var waiter = host.NewClient(TestHost.BrokerKey).AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 45_000 }, "waiter");
        await MultiInstanceTests.UntilAsync(async () => await MultiInstanceTests.WaitersOnAsync(host, pool) == 1, Limit, "the caller to wait for capacity");

        var stopping = host.StopAsync();

        // Readiness goes down at once; the instance goes on serving on new connections (a load
        // balancer has not noticed yet), and tells each client to close its connection.
        await MultiInstanceTests.UntilAsync(async () => (await ProbeAsync(host.BaseAddress, "health/ready")) == HttpStatusCode.ServiceUnavailable, Limit, "readiness to go down");
        using (var fresh = NewHttp(host.BaseAddress))
        {
            fresh.DefaultRequestHeaders.Add(AllocatorClient.ApiKeyHeader, TestHost.BrokerKey);
            using var served = await fresh.GetAsync($"v1/pools/{pool}");
            served.StatusCode.Should().Be(HttpStatusCode.OK, "the listener stays open while load balancers learn the instance is not ready");
            served.Headers.ConnectionClose.Should().BeTrue("no client keeps a connection the closing listener would cut");
            (await fresh.GetAsync("health/live")).StatusCode.Should().Be(HttpStatusCode.OK, "the instance is alive, only leaving");
        }

        // Then the listener closes: new connections are refused (the caller goes elsewhere)...
        await MultiInstanceTests.UntilAsync(async () => await RefusedAsync(host.BaseAddress), Limit, "the listener to close");

        // ...while the request in flight goes on: capacity freed now still serves the waiter.
        stopping.IsCompleted.Should().BeFalse("the stop waits for the request in flight");
        (await host.Store.ReleaseAsync(pool, holder.AllocationId, holder.Epoch)).Status.Should().Be(LeaseStatus.Ok);
        var result = await TaskLimit.WithinAsync(waiter, Limit, "the waiter to be served during the stop");
        result.Status.Should().Be(AllocateStatus.Allocated);
        await stopping.WaitAsync(Limit);
    }

    [Fact]
    public async Task StopOfTheInstanceHostingThePoolsGrain_ItsWaiterThroughTheOtherInstanceKeepsWaiting_AndNothingFails()
    {
        var run = Guid.NewGuid().ToString("N")[..10];
        string[] cluster =
        [
            $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
            "--Allocator:Cluster:Membership=postgres",
            $"--Allocator:Cluster:ClusterId=stop-{run}",
            $"--Allocator:Cluster:MembershipSchema=cluster_{run}",
        ];
        int[] siloPorts = [FreePort.Next(), FreePort.Next()];
        await using var a = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:SiloPort={siloPorts[0]}"]);
        await using var b = await TestHost.StartAsync([.. cluster, $"--Allocator:Cluster:SiloPort={siloPorts[1]}"]);
        TestHost[] hosts = [a, b];
        var pool = await MultiInstanceTests.NewPoolAsync(a, "stop-handover", workers: 1, capacity: 1, new Client.PoolSettings { MaxWaitMs = 60_000 });
        var holder = (await a.Broker.AllocateAsync(pool, new AllocateRequest(), "holder")).Allocation!;
        var grainHost = Array.IndexOf(siloPorts, SiloPort((await a.Broker.GetPoolAsync(pool)).GrainSilo!));
        grainHost.Should().BeGreaterThanOrEqualTo(0);
        var stopped = hosts[grainHost];
        var survivor = hosts[1 - grainHost];
        var waiter = survivor.NewClient(TestHost.BrokerKey).AllocateAsync(pool, new AllocateRequest { MaxWaitMs = 45_000 }, "waiter");
        await MultiInstanceTests.UntilAsync(async () => await MultiInstanceTests.WaitersOnAsync(survivor, pool) == 1, Limit, "the caller to wait in the grain");

        // The instance hosting the pool's grain stops: the grain moves to the survivor with its
        // waiter (sent again by the survivor, not failed), and the survivor keeps serving.
        await stopped.StopAsync().WaitAsync(Limit);
        var after = await survivor.Broker.GetPoolAsync(pool);
        SiloPort(after.GrainSilo!).Should().Be(siloPorts[1 - grainHost], "the grain moved to the surviving instance");
        waiter.IsCompleted.Should().BeFalse("a waiter is handed over, not failed");

        await survivor.Broker.ReleaseAsync(pool, holder.AllocationId, holder.Epoch);
        var result = await TaskLimit.WithinAsync(waiter, Limit, "the handed-over waiter to be served");
        result.Allocation!.SessionKey.Should().Be("waiter");
        (await survivor.Broker.AllocateAsync(pool, new AllocateRequest(), "after")).Status.Should().Be(AllocateStatus.NoCapacity);
    }

    private static HttpClient NewHttp(Uri address) => new(new SocketsHttpHandler { PooledConnectionLifetime = TimeSpan.Zero }) { BaseAddress = address, Timeout = TimeSpan.FromSeconds(10) };

    private static async Task<HttpStatusCode?> ProbeAsync(Uri address, string path)
    {
        using var http = NewHttp(address);
        try
        {
            using var response = await http.GetAsync(path);
            return response.StatusCode;
        }
        catch (HttpRequestException)
        {
            return null;
        }
    }

    private static async Task<bool> RefusedAsync(Uri address)
    {
        using var http = NewHttp(address);
        try
        {
            using var response = await http.GetAsync("health/live");
            return false;
        }
        catch (HttpRequestException ex) when (ex.InnerException is SocketException { SocketErrorCode: SocketError.ConnectionRefused })
        {
            return true;
        }
    }

    private static int SiloPort(string silo) => int.Parse(silo.Split(':', '@')[1], System.Globalization.CultureInfo.InvariantCulture);
}
