using System.Diagnostics;
using System.Globalization;
using Allocator.Client;
using Allocator.Networking;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Several host processes (<c>Allocator.Host.dll</c>, as deployed) on the run's PostgreSQL schema,
/// forming one Orleans cluster with membership in the same database; callers are spread over
/// them round-robin, so every pool grain is reached from every instance. The processes reach the
/// database through the run's connection string, so through the latency proxy when an RTT is
/// injected.
/// </summary>
internal sealed class ClusterDriver : IAllocationDriver
{
    private readonly List<Process> _hosts;
    private readonly List<HttpClient> _http;
    private readonly List<AllocatorClient> _clients;
    private long _next;

    private ClusterDriver(List<Process> hosts, List<HttpClient> http)
    {
        _hosts = hosts;
        _http = http;
        _clients = [.. http.Select(h => new AllocatorClient(h))];
    }

    public string Name => $"cluster of {_hosts.Count}";

    /// <param name="connectionString">The run's connection string (through the proxy when an RTT is injected).</param>
    /// <param name="schema">The run's schema (already migrated and provisioned).</param>
    public static async Task<IAllocationDriver> StartAsync(string connectionString, string schema, int instances, int maxConnections, CancellationToken cancellationToken)
    {
        var host = HostAssembly();
        var run = Guid.NewGuid().ToString("N")[..10];
        List<Process> processes = [];
        List<HttpClient> clients = [];
        try
        {
            for (var i = 0; i < instances; i++)
            {
                var httpPort = FreePort.Next();
                var start = new ProcessStartInfo("dotnet")
                {
                    WorkingDirectory = Path.GetDirectoryName(host)!,
                    RedirectStandardOutput = true,
                    RedirectStandardError = true,
                };
                foreach (var arg in new[]
                {
                    host, "--urls", $"http://127.0.0.1:{httpPort}", "--environment", "Production",
                    "--Logging:LogLevel:Default", "Warning",
                    "--Allocator:Auth:Disabled=true", "--Allocator:RateLimit:Disabled=true",
                    $"--ConnectionStrings:Allocator={WithPoolSize(connectionString, maxConnections)}",
                    $"--Allocator:Storage:Postgres:Schema={schema}",
                    "--Allocator:Cluster:Membership=postgres",
                    $"--Allocator:Cluster:ClusterId=load-{run}",
                    $"--Allocator:Cluster:MembershipSchema=cluster_{run}",
                    $"--Allocator:Cluster:SiloPort={FreePort.Next()}",
                })
                {
                    start.ArgumentList.Add(arg);
                }

                var process = Process.Start(start) ?? throw new InvalidOperationException("Could not start a host process.");
                _ = DrainAsync(process.StandardOutput);
                _ = DrainAsync(process.StandardError);
                processes.Add(process);
                clients.Add(new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = 2_048, PooledConnectionLifetime = Timeout.InfiniteTimeSpan, UseProxy = false })
                {
                    BaseAddress = new Uri($"http://127.0.0.1:{httpPort}/"),
                    Timeout = TimeSpan.FromSeconds(60),
                });
            }

            // Ready means the store is migrated and the silo has joined the cluster.
            for (var i = 0; i < instances; i++)
            {
                await WaitReadyAsync(processes[i], clients[i], cancellationToken);
            }

            return new ClusterDriver(processes, clients);
        }
        catch
        {
            foreach (var process in processes)
            {
                process.Kill(entireProcessTree: true);
                process.Dispose();
            }

            foreach (var client in clients)
            {
                client.Dispose();
            }

            throw;
        }
    }

    public Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        HttpCalls.AllocateAsync(NextClient(), poolId, request, cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        HttpCalls.ReleaseAsync(NextClient(), poolId, allocationId, epoch, cancellationToken);

    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        HttpCalls.RegisterAsync(NextClient(), poolId, registration, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        foreach (var client in _http)
        {
            client.Dispose();
        }

        // SIGTERM: a graceful stop (the silo leaves the cluster, batches in flight finish).
        foreach (var process in _hosts)
        {
            using var term = Process.Start("kill", ["-TERM", process.Id.ToString(CultureInfo.InvariantCulture)]);
            await term.WaitForExitAsync();
        }

        foreach (var process in _hosts)
        {
            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            try
            {
                await process.WaitForExitAsync(timeout.Token);
            }
            catch (OperationCanceledException)
            {
                process.Kill(entireProcessTree: true);
            }

            process.Dispose();
        }
    }

    private AllocatorClient NextClient() => _clients[(int)(Interlocked.Increment(ref _next) % _clients.Count)];

    private static async Task WaitReadyAsync(Process process, HttpClient client, CancellationToken cancellationToken)
    {
        var watch = Stopwatch.StartNew();
        while (watch.Elapsed < TimeSpan.FromSeconds(90))
        {
            if (process.HasExited)
            {
                throw new InvalidOperationException($"A host process exited during start-up (exit code {process.ExitCode}).");
            }

            try
            {
                using var response = await client.GetAsync("health/ready", cancellationToken);
                if (response.IsSuccessStatusCode)
                {
                    return;
                }
            }
            catch (HttpRequestException)
            {
                // not listening yet
            }

            await Task.Delay(200, cancellationToken);
        }

        throw new TimeoutException("A host process was not ready within 90 s.");
    }

    private static async Task DrainAsync(StreamReader reader)
    {
        while (await reader.ReadLineAsync() is not null)
        {
        }
    }

    private static string WithPoolSize(string connectionString, int maxConnections) =>
        new Npgsql.NpgsqlConnectionStringBuilder(connectionString) { MaxPoolSize = maxConnections }.ConnectionString;

    /// <summary>src/Allocator.Host/bin/&lt;configuration&gt;/&lt;tfm&gt;/Allocator.Host.dll, built with the load tests.</summary>
    private static string HostAssembly()
    {
        var here = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        var (tfm, configuration) = (here.Name, here.Parent!.Name);
        for (var dir = here; dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Allocator.sln")))
            {
                var dll = Path.Combine(dir.FullName, "src", "Allocator.Host", "bin", configuration, tfm, "Allocator.Host.dll");
                return File.Exists(dll) ? dll : throw new FileNotFoundException($"Build the host first ({dll}).", dll);
            }
        }

        throw new InvalidOperationException("Allocator.sln not found above the load tests' folder.");
    }
}
