using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Npgsql;

namespace Allocator.Reliability.Cluster;

/// <summary>The nested timeouts every scenario cluster runs with (lock &lt; command &lt; grain call &lt; HTTP request).</summary>
internal sealed record Timeouts(TimeSpan Lock, TimeSpan Command, TimeSpan GrainCall, TimeSpan Request)
{
    /// <summary>Shorter than the defaults (2/5/10/15 s) so that scenarios stay short; the nesting is the same.</summary>
    public static readonly Timeouts Scenario = new(TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(3), TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(8));
}

/// <summary>What a cluster of host processes runs on and with.</summary>
/// <param name="Name">Short name; the cluster id, schema and application names derive from it.</param>
/// <param name="ConnectionString">The database the instances use (possibly through a latency proxy).</param>
/// <param name="MaxPoolSize">Npgsql's Maximum Pool Size per instance; null: Npgsql's default (100).</param>
internal sealed record ClusterSpec(string Name, int Instances, string ConnectionString, int? MaxPoolSize = null, Timeouts? Timeouts = null)
{
    public Timeouts EffectiveTimeouts => Timeouts ?? Cluster.Timeouts.Scenario;
}

/// <summary>
/// N real <c>Allocator.Host</c> processes (the build output, as <c>eng/run.sh --instances N</c>
/// starts them) on one PostgreSQL, forming one Orleans cluster with membership in that database.
/// Each instance keeps its HTTP and silo ports across restarts. Instance i connects with
/// <c>Application Name=faults-&lt;cluster&gt;-i&lt;i&gt;</c>, which is how fault injectors find its backends.
/// </summary>
internal sealed class HostCluster : IAsyncDisposable
{
    public const string ApiKey = "faults-admin-key";
    private readonly ClusterSpec _spec;
    private readonly string _logDirectory;
    private readonly Instance[] _instances;

    private HostCluster(ClusterSpec spec, string id, string logDirectory)
    {
        _spec = spec;
        Id = id;
        Schema = "f_" + id.Replace('-', '_');
        _logDirectory = logDirectory;
        _instances = [.. Enumerable.Range(0, spec.Instances).Select(i => new Instance(i, FreePort(), FreePort()))];
        Urls = [.. _instances.Select(i => new Uri($"http://127.0.0.1:{i.HttpPort}/"))];
        Running[this] = 0;
    }

    /// <summary>The cluster id (unique per start), e.g. <c>std-1a2b3c</c>.</summary>
    public string Id { get; }

    /// <summary>The store's schema in the database.</summary>
    public string Schema { get; }

    public IReadOnlyList<Uri> Urls { get; }

    public ClusterSpec Spec => _spec;

    public Timeouts Timeouts => _spec.EffectiveTimeouts;

    /// <summary>The prefix of every application name the instances connect with (a LIKE pattern).</summary>
    public string ApplicationNamePattern => $"faults-{Id}-%";

    public static async Task<HostCluster> StartAsync(ClusterSpec spec, string artifacts, CancellationToken cancellationToken)
    {
        var id = $"{spec.Name}-{Guid.NewGuid().ToString("N")[..6]}";
        var cluster = new HostCluster(spec, id, Path.Combine(artifacts, "clusters", id));
        try
        {
            // The first instance applies the migrations alone; the others then start together.
            await cluster.StartInstanceAsync(0, cancellationToken);
            await Task.WhenAll(Enumerable.Range(1, spec.Instances - 1).Select(i => cluster.StartInstanceAsync(i, cancellationToken)));
            return cluster;
        }
        catch
        {
            await cluster.DisposeAsync();
            throw;
        }
    }

    /// <summary>SIGKILL: no shutdown, no goodbye to the cluster, connections dropped by the kernel.</summary>
    public void Kill(int instance)
    {
        var process = _instances[instance].Process;
        if (process is { HasExited: false })
        {
            process.Kill();
            process.WaitForExit(10_000);
        }
    }

    public bool IsRunning(int instance) => _instances[instance].Process is { HasExited: false };

    public Task RestartAsync(int instance, CancellationToken cancellationToken)
    {
        Kill(instance);
        return StartInstanceAsync(instance, cancellationToken);
    }

    /// <summary>The instance whose silo hosts the grain, from a silo id such as <c>127.0.0.1:11112@1234</c>.</summary>
    public int? InstanceOfSilo(string? silo)
    {
        if (silo is null)
        {
            return null;
        }

        var port = silo.Split(':', '@') is [_, var p, ..] && int.TryParse(p, CultureInfo.InvariantCulture, out var parsed) ? parsed : -1;
        return _instances.FirstOrDefault(i => i.SiloPort == port)?.Index;
    }

    private async Task StartInstanceAsync(int index, CancellationToken cancellationToken)
    {
        var instance = _instances[index];
        var dll = HostDll();
        var t = Timeouts;
        var start = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            WorkingDirectory = Path.GetDirectoryName(dll)!,
        };
        foreach (var arg in (string[])
        [
            dll, "--contentRoot", Path.GetDirectoryName(dll)!,
            "--urls", $"http://127.0.0.1:{instance.HttpPort}",
            "--Allocator:Cluster:Membership=postgres",
            $"--Allocator:Cluster:ClusterId={Id}",
            $"--Allocator:Cluster:SiloPort={instance.SiloPort}",
            $"--Allocator:Storage:Postgres:Schema={Schema}",
            "--Allocator:RateLimit:Disabled=true",
            $"--Allocator:Timeouts:LockTimeout={t.Lock:c}",
            $"--Allocator:Timeouts:CommandTimeout={t.Command:c}",
            $"--Allocator:Timeouts:GrainCallTimeout={t.GrainCall:c}",
            $"--Allocator:Timeouts:RequestTimeout={t.Request:c}",
        ])
        {
            start.ArgumentList.Add(arg);
        }

        var connection = new NpgsqlConnectionStringBuilder(_spec.ConnectionString) { ApplicationName = $"faults-{Id}-i{index}" };
        if (_spec.MaxPoolSize is { } size)
        {
            connection.MaxPoolSize = size;
        }

        start.Environment["ConnectionStrings__Allocator"] = connection.ConnectionString;
        start.Environment["ALLOCATOR_DEMO_KEY"] = ApiKey;
        start.Environment["Logging__LogLevel__Default"] = "Warning";
        start.Environment["Logging__LogLevel__Microsoft.Hosting.Lifetime"] = "Information";
        start.Environment["DOTNET_gcServer"] = "0"; // several instances share two cores
        Directory.CreateDirectory(_logDirectory);
        var log = new StreamWriter(Path.Combine(_logDirectory, $"instance-{index}.log"), append: true) { AutoFlush = true };
        await log.WriteLineAsync($"---- start {TimeProvider.System.GetUtcNow():O}");
        var process = Process.Start(start) ?? throw new InvalidOperationException("dotnet did not start.");
        instance.Process = process;
        instance.Log = log;
        _ = CopyAsync(process.StandardOutput, log);
        _ = CopyAsync(process.StandardError, log);

        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(5) };
        var clock = Stopwatch.StartNew();
        while (true)
        {
            cancellationToken.ThrowIfCancellationRequested();
            if (process.HasExited)
            {
                throw new InvalidOperationException($"Instance {index} of cluster {Id} exited during start-up (exit code {process.ExitCode}); see {_logDirectory}/instance-{index}.log.");
            }

            try
            {
                using var ready = await http.GetAsync(new Uri(Urls[index], "health/ready"), cancellationToken);
                if (ready.IsSuccessStatusCode)
                {
                    return;
                }
            }
            catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
            {
                // Not listening yet.
            }

            if (clock.Elapsed > TimeSpan.FromSeconds(120))
            {
                throw new TimeoutException($"Instance {index} of cluster {Id} was not ready after 120 s; see {_logDirectory}/instance-{index}.log.");
            }

            await Task.Delay(200, cancellationToken);
        }
    }

    private static async Task CopyAsync(StreamReader from, StreamWriter to)
    {
        try
        {
            while (await from.ReadLineAsync() is { } line)
            {
                lock (to)
                {
                    to.WriteLine(line);
                }
            }
        }
        catch (Exception ex) when (ex is IOException or ObjectDisposedException)
        {
            // The process ended.
        }
    }

    public async ValueTask DisposeAsync()
    {
        // SIGKILL: nothing of a finished scenario needs a graceful stop, and it is quick.
        for (var i = 0; i < _instances.Length; i++)
        {
            Kill(i);
            _instances[i].Process?.Dispose();
        }

        await Task.Delay(100);
        foreach (var instance in _instances)
        {
            instance.Log?.Dispose();
        }

        Running.TryRemove(this, out _);
    }

    /// <summary>Clusters still running when the process exits (a crashed runner) are killed, so no host outlives it.</summary>
    private static readonly System.Collections.Concurrent.ConcurrentDictionary<HostCluster, byte> Running = CreateRegistry();

    private static System.Collections.Concurrent.ConcurrentDictionary<HostCluster, byte> CreateRegistry()
    {
        var running = new System.Collections.Concurrent.ConcurrentDictionary<HostCluster, byte>();
        AppDomain.CurrentDomain.ProcessExit += (_, _) =>
        {
            foreach (var cluster in running.Keys)
            {
                for (var i = 0; i < cluster._instances.Length; i++)
                {
                    try
                    {
                        cluster.Kill(i);
                    }
                    catch (InvalidOperationException)
                    {
                    }
                }
            }
        };
        return running;
    }

    /// <summary>The host's build output: <c>src/Allocator.Host/bin/Release/net10.0/Allocator.Host.dll</c>, or ALLOCATOR_HOST_DLL.</summary>
    public static string HostDll()
    {
        if (Environment.GetEnvironmentVariable("ALLOCATOR_HOST_DLL") is { Length: > 0 } configured)
        {
            return configured;
        }

        var path = Path.Combine(Repository.Root, "src", "Allocator.Host", "bin", "Release", "net10.0", "Allocator.Host.dll");
        return File.Exists(path) ? path : throw new FileNotFoundException($"The host is not built: run 'dotnet build src/Allocator.Host -c Release' first ({path}).");
    }

    public static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    private sealed class Instance(int index, int httpPort, int siloPort)
    {
        public int Index { get; } = index;

        public int HttpPort { get; } = httpPort;

        public int SiloPort { get; } = siloPort;

        public Process? Process { get; set; }

        public StreamWriter? Log { get; set; }
    }
}

internal static class Repository
{
    public static string Root { get; } = Find();

    private static string Find()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Allocator.sln")))
            {
                return dir.FullName;
            }
        }

        throw new InvalidOperationException("Allocator.sln not found above " + AppContext.BaseDirectory);
    }
}
