using System.Diagnostics;
using System.Globalization;
using System.Net;
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
        // Without one a caller that connects in the instant the listener closes can be reset: the
        // kernel resets connections not yet accepted.
        await using var cluster = await RunScript.StartAsync(instances: 3, output, ("Allocator__Shutdown__DrainDelay", "00:00:02"));
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

        var script = Process.Start(new ProcessStartInfo("bash", ["eng/rolling-restart.sh"]) { WorkingDirectory = RunScript.RepositoryRoot(), RedirectStandardOutput = true, RedirectStandardError = true })!;
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

/// <summary>
/// <c>eng/run.sh --instances N</c> as a user runs it (on the tests' PostgreSQL, without building
/// again), on free ports; disposing sends it SIGTERM, which stops every instance it started.
/// </summary>
internal sealed partial class RunScript : IAsyncDisposable
{
    private readonly Process _script;
    private readonly List<int> _pids;

    private RunScript(Process script, List<Uri> urls, List<int> siloPorts, List<int> pids, string key)
    {
        _script = script;
        Urls = urls;
        SiloPorts = siloPorts;
        _pids = pids;
        Key = key;
    }

    public List<Uri> Urls { get; }

    public List<int> SiloPorts { get; }

    public string Key { get; }

    public static async Task<RunScript> StartAsync(int instances, ITestOutputHelper output, params (string Name, string Value)[] environment)
    {
        var root = RepositoryRoot();
        var start = new ProcessStartInfo("bash", ["eng/run.sh", "--instances", instances.ToString(CultureInfo.InvariantCulture)])
        {
            WorkingDirectory = root,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.Environment["ConnectionStrings__Allocator"] = TestPostgres.ConnectionString;
        start.Environment["ALLOCATOR_NO_BUILD"] = "1";
        start.Environment["ALLOCATOR_BASE_PORT"] = FreeRange(instances).ToString(CultureInfo.InvariantCulture);
        start.Environment["ALLOCATOR_SILO_BASE_PORT"] = FreeRange(instances).ToString(CultureInfo.InvariantCulture);
        start.Environment["Logging__LogLevel__Default"] = "Warning";
        foreach (var (name, value) in environment)
        {
            start.Environment[name] = value;
        }

        var script = Process.Start(start)!;
        _ = script.StandardError.ReadToEndAsync();
        List<Uri> urls = [];
        List<int> siloPorts = [];
        List<int> pids = [];
        string? key = null;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));
        while (key is null || urls.Count < instances)
        {
            var line = await script.StandardOutput.ReadLineAsync(timeout.Token)
                ?? throw new InvalidOperationException("eng/run.sh ended before its instances were ready.");
            output.WriteLine("run.sh: " + line);
            if (Instance().Match(line) is { Success: true } m)
            {
                urls.Add(new Uri(m.Groups["url"].Value + "/"));
                siloPorts.Add(int.Parse(m.Groups["silo"].Value, CultureInfo.InvariantCulture));
                pids.Add(int.Parse(m.Groups["pid"].Value, CultureInfo.InvariantCulture));
            }
            else if (line.StartsWith("X-Api-Key: ", StringComparison.Ordinal))
            {
                key = line["X-Api-Key: ".Length..].Trim();
            }
        }

        _ = DrainAsync(script);
        return new RunScript(script, urls, siloPorts, pids, key);
    }

    public void Kill(int instance) => Process.GetProcessById(_pids[instance]).Kill(); // SIGKILL

    public async ValueTask DisposeAsync()
    {
        using (var term = Process.Start("kill", ["-TERM", _script.Id.ToString(CultureInfo.InvariantCulture)]))
        {
            await term.WaitForExitAsync();
        }

        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        try
        {
            await _script.WaitForExitAsync(timeout.Token);
        }
        catch (OperationCanceledException)
        {
            // The instances run.sh started, including those it started again after a restart.
            var current = Directory.GetFiles(Path.Combine(RepositoryRoot(), "artifacts", "run"), "instance-*.pid")
                .Select(f => int.TryParse(File.ReadAllText(f).Trim(), CultureInfo.InvariantCulture, out var pid) ? pid : 0);
            foreach (var pid in _pids.Concat(current).Where(p => p > 0).Distinct())
            {
                try
                {
                    Process.GetProcessById(pid).Kill();
                }
                catch (ArgumentException)
                {
                    // already gone
                }
            }
        }

        _script.Dispose();
    }

    private static async Task DrainAsync(Process script)
    {
        while (await script.StandardOutput.ReadLineAsync() is not null)
        {
        }
    }

    public static string RepositoryRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Allocator.sln")))
            {
                return dir.FullName;
            }
        }

        throw new InvalidOperationException("Allocator.sln not found above the test's directory.");
    }

    /// <summary>The first of <paramref name="count"/> consecutive loopback ports that are free now.</summary>
    private static int FreeRange(int count)
    {
        for (var attempt = 0; attempt < 50; attempt++)
        {
            var first = Random.Shared.Next(20_000, 40_000);
            if (Enumerable.Range(first, count).All(IsFree))
            {
                return first;
            }
        }

        throw new InvalidOperationException("No free port range found.");
    }

    private static bool IsFree(int port)
    {
        try
        {
            using var listener = new TcpListener(IPAddress.Loopback, port);
            listener.Start();
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    [GeneratedRegex(@"instance (?<i>\d+): (?<url>http://\S+)\s+silo port (?<silo>\d+)\s+pid (?<pid>\d+)")]
    private static partial Regex Instance();
}
