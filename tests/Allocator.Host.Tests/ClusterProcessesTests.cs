using System.Diagnostics;
using System.Globalization;
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

    private static AllocatorClient NewClient(Uri url, string key)
    {
        var http = new HttpClient { BaseAddress = url, Timeout = TimeSpan.FromSeconds(30) };
        http.DefaultRequestHeaders.Add(AllocatorClient.ApiKeyHeader, key);
        return new AllocatorClient(http);
    }

    [GeneratedRegex(@":(\d+)@")]
    private static partial Regex GrainPort();
}
