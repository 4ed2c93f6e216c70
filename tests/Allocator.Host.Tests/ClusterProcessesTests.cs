using System.Diagnostics;
using System.Globalization;
using System.Net.Sockets;
using System.Text.RegularExpressions;
using Allocator.Client;
using Xunit.Abstractions;

namespace Allocator.Host.Tests;

/// <summary>
/// Three host processes on one database, one Orleans cluster, started the documented way
/// (<c>eng/run.sh --instances 3</c>); one is killed with SIGKILL while it hosts the pool's grain.
/// </summary>
public sealed partial class ClusterProcessesTests(ITestOutputHelper output)
{
    [Fact]
    public async Task ThreeProcesses_KillTheGrainsHost_AllocationsThroughTheOthersResume()
    {
        await using var cluster = await RunScript.StartAsync(instances: 3, output);
        var clients = cluster.Urls.Select(url => NewClient(url, cluster.Key)).ToList();
        var pool = "e2e-" + Guid.NewGuid().ToString("N")[..10];
        await clients[0].PutPoolAsync(pool, new Client.PoolSettings());
        await clients[0].RegisterWorkersAsync(pool, [.. Enumerable.Range(1, 10).Select(i => new WorkerBatchEntry($"w{i}", $"10.0.9.{i}:1", 100))]);

        // Allocations through all three instances land in one grain.
        List<AllocationInfo> made = [];
        for (var i = 0; i < 30; i++)
        {
            var result = await clients[i % 3].AllocateAsync(pool, new AllocateRequest(), $"before-{i}");
            result.Status.Should().Be(AllocateStatus.Allocated);
            made.Add(result.Allocation!);
        }

        var silos = await Task.WhenAll(clients.Select(c => c.GetPoolAsync(pool)));
        silos.Select(s => s.GrainSilo).Distinct().Should().HaveCount(1, "one grain for the pool in the whole cluster");
        var grainPort = int.Parse(GrainPort().Match(silos[0].GrainSilo!).Groups[1].Value, CultureInfo.InvariantCulture);
        var victim = cluster.SiloPorts.IndexOf(grainPort);
        victim.Should().BeGreaterThanOrEqualTo(0, $"the grain's silo {silos[0].GrainSilo} is one of the three");

        // kill -9 the process hosting the grain, then allocate through a survivor until it works.
        var survivor = clients[(victim + 1) % 3];
        cluster.Kill(victim);
        var clock = Stopwatch.StartNew();
        var attempts = 0;
        AllocateResult? resumed = null;
        while (clock.Elapsed < TimeSpan.FromSeconds(90))
        {
            attempts++;
            try
            {
                var result = await survivor.AllocateAsync(pool, new AllocateRequest(), $"after-{attempts}");
                if (result.Status == AllocateStatus.Allocated)
                {
                    resumed = result;
                    break;
                }
            }
            catch (Exception ex) when (ex is AllocatorApiException or HttpRequestException or TaskCanceledException)
            {
                // 503 while the cluster learns that the silo is dead: retry, as a broker would.
            }

            await Task.Delay(100);
        }

        var failover = clock.Elapsed;
        output.WriteLine(string.Create(CultureInfo.InvariantCulture, $"failover after kill -9 of the grain's host: first allocation through a survivor succeeded after {failover.TotalSeconds:F1} s ({attempts} attempts)"));
        resumed.Should().NotBeNull("allocations through the surviving instances must resume");
        made.Add(resumed!.Value.Allocation!);

        // The database is the truth: every success is committed, loads add up, the grain moved.
        var after = await survivor.GetPoolAsync(pool);
        after.GrainSilo.Should().NotBe(silos[0].GrainSilo);
        foreach (var allocation in made)
        {
            (await survivor.GetAllocationAsync(pool, allocation.AllocationId)).Active.Should().BeTrue();
        }

        after.Load.Should().Be(after.ActiveAllocations, "each allocation holds one unit");
        after.ActiveAllocations.Should().BeGreaterThanOrEqualTo(made.Count);
    }

    [Fact]
    public async Task ThreeProcesses_RollingRestartWithTheScript_UnderLoad_NoCallFails()
    {
        // docs/operations.md, as a user of eng/run.sh --instances 3 does it, with brokers behind a
        // load balancer that follows readiness (as the manifest's probes do), here a router that
        // probes each instance every 100 ms; the drain delay is the time it has to notice a stop.
        // (Callers that pick instances at random are the rolling-restart fault scenario's.)
        await using var cluster = await RunScript.StartAsync(instances: 3, output, hostArgs: ["--Allocator:Shutdown:DrainDelay=00:00:02"]);
        var clients = cluster.Urls.Select(url => NewClient(url, cluster.Key)).ToList();
        var pool = "roll-" + Guid.NewGuid().ToString("N")[..10];
        await clients[0].PutPoolAsync(pool, new Client.PoolSettings());
        await clients[0].RegisterWorkersAsync(pool, [.. Enumerable.Range(1, 10).Select(i => new WorkerBatchEntry($"w{i}", $"10.0.8.{i}:1", 100))]);

        using var stop = new CancellationTokenSource();
        var ready = cluster.Urls.Select(_ => true).ToArray();
        var router = Task.Run(async () =>
        {
            using var probe = new HttpClient { Timeout = TimeSpan.FromSeconds(1) };
            while (!stop.IsCancellationRequested)
            {
                for (var i = 0; i < cluster.Urls.Count; i++)
                {
                    try
                    {
                        using var answer = await probe.GetAsync(new Uri(cluster.Urls[i], "health/ready"));
                        Volatile.Write(ref ready[i], answer.IsSuccessStatusCode);
                    }
                    catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
                    {
                        Volatile.Write(ref ready[i], false);
                    }
                }

                await Task.Delay(100);
            }
        });

        AllocatorClient Pick()
        {
            var candidates = Enumerable.Range(0, clients.Count).Where(i => Volatile.Read(ref ready[i])).ToList();
            return clients[candidates.Count == 0 ? Random.Shared.Next(clients.Count) : candidates[Random.Shared.Next(candidates.Count)]];
        }

        // A refused connection (the stopped instance, before the router noticed) sends the call to
        // another instance, as a load balancer does. Anything else is a failure.
        var failures = new System.Collections.Concurrent.ConcurrentQueue<string>();
        long refused = 0, done = 0;
        async Task<T?> CallAsync<T>(Func<AllocatorClient, Task<T>> call)
        {
            for (var attempt = 0; attempt < 20; attempt++)
            {
                try
                {
                    return await call(Pick());
                }
                catch (HttpRequestException ex) when (ex.InnerException is SocketException { SocketErrorCode: SocketError.ConnectionRefused })
                {
                    Interlocked.Increment(ref refused);
                    await Task.Delay(50);
                }
                catch (Exception ex) when (ex is AllocatorApiException or HttpRequestException or TaskCanceledException)
                {
                    failures.Enqueue($"{ex.GetType().Name}: {ex.Message}");
                    return default;
                }
            }

            failures.Enqueue("20 refused connections in a row");
            return default;
        }

        var brokers = Enumerable.Range(0, 8).Select(b => Task.Run(async () =>
        {
            for (var session = 0; !stop.IsCancellationRequested; session++)
            {
                var placed = await CallAsync(c => c.AllocateAsync(pool, new AllocateRequest(), $"roll-{b}-{session}"));
                if (placed.Allocation is { } allocation)
                {
                    await CallAsync(async c =>
                    {
                        await c.ReleaseAsync(pool, allocation.AllocationId, allocation.Epoch);
                        return true;
                    });
                    Interlocked.Increment(ref done);
                }
            }
        })).ToList();

        var script = Process.Start(new ProcessStartInfo("bash", ["eng/rolling-restart.sh"]) { WorkingDirectory = Repository.Root, RedirectStandardOutput = true, RedirectStandardError = true })!;
        var said = script.StandardOutput.ReadToEndAsync();
        var complained = script.StandardError.ReadToEndAsync();
        await script.WaitForExitAsync().WaitAsync(TimeSpan.FromMinutes(4));
        await stop.CancelAsync();
        await Task.WhenAll(brokers).WaitAsync(TimeSpan.FromMinutes(1));
        await router.WaitAsync(TimeSpan.FromSeconds(10));
        output.WriteLine("eng/rolling-restart.sh: " + await said + await complained);
        output.WriteLine($"sessions allocated and released: {done}, connections refused (and sent elsewhere): {refused}");

        script.ExitCode.Should().Be(0, "every instance stops and is ready again");
        (await said).Split('\n', StringSplitOptions.RemoveEmptyEntries).Should().HaveCount(3);
        failures.Should().BeEmpty("a rolling restart must not show through to brokers");
        done.Should().BeGreaterThan(0);
    }

    private static AllocatorClient NewClient(Uri url, string key)
    {
        var http = new HttpClient { BaseAddress = url, Timeout = TimeSpan.FromSeconds(30) };
        http.DefaultRequestHeaders.Add(AllocatorClient.ApiKeyHeader, key);
        return new AllocatorClient(http);
    }

    [GeneratedRegex(@":(\d+)@")]
    private static partial Regex GrainPort();
}
