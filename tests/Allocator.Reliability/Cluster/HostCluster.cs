using System.Diagnostics;
using System.Globalization;
using Allocator.Networking;
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
/// <param name="MoreDatabases">Further databases (issue 23), <c>Allocator:Databases:{name}</c>; <see cref="ConnectionString"/> is then the default one.</param>
/// <param name="Build">The host every instance starts with (its <c>Allocator.Host.dll</c>); null: this build's (<see cref="HostCluster.HostDll"/>).</param>
/// <param name="SiloLinks">
/// Silo traffic goes through a proxy per instance, so that one instance's silo can be cut off from
/// the others (<see cref="HostCluster.CutOff"/>) while its HTTP and database traffic flow on:
/// instance i's silo has an address of its own (127.0.0.(11+i)), advertises its proxy's port, and
/// its outgoing silo connections leave from that address.
/// </param>
internal sealed record ClusterSpec(string Name, int Instances, string ConnectionString, int? MaxPoolSize = null, Timeouts? Timeouts = null, IReadOnlyList<(string Name, string ConnectionString)>? MoreDatabases = null, string? Build = null, bool SiloLinks = false)
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

    /// <summary>The tenant of <see cref="ApiKey"/> (the host's demo admin key).</summary>
    public const string ApiKeyTenant = "demo";

    /// <summary>Two broker keys of different tenants, granted every pool (issue 22: brokers kept apart).</summary>
    public static readonly (string Key, string Tenant)[] BrokerKeys = [("faults-broker-a-key", "farm-a"), ("faults-broker-b-key", "farm-b")];
    private readonly ClusterSpec _spec;
    private readonly string _logDirectory;
    private readonly Instance[] _instances;
    private readonly Uri[] _urls;
    private readonly string[] _builds;
    private readonly PartitionProxy?[] _siloProxies;

    private HostCluster(ClusterSpec spec, string id, string logDirectory)
    {
        _spec = spec;
        Id = id;
        Schema = "f_" + id.Replace('-', '_');
        _logDirectory = logDirectory;
        _instances = [.. Enumerable.Range(0, spec.Instances).Select(i => NewInstance(i))];
        _siloProxies = [.. _instances.Select(i => spec.SiloLinks
            ? PartitionProxy.Start(new System.Net.IPEndPoint(i.SiloAddress, i.ListenPort), new System.Net.IPEndPoint(i.SiloAddress, i.SiloPort))
            : null)];
        _builds = [.. Enumerable.Repeat(spec.Build ?? HostDll(), spec.Instances)];
        _urls = [.. _instances.Select(i => new Uri($"http://127.0.0.1:{i.HttpPort}/"))];
        Running[this] = 0;
    }

    /// <summary>The cluster id (unique per start), e.g. <c>std-1a2b3c</c>.</summary>
    public string Id { get; }

    /// <summary>The store's schema in the database.</summary>
    public string Schema { get; }

    /// <summary>The instances' base addresses; an instance that had to move to other ports on a restart changes its entry in place.</summary>
    public IReadOnlyList<Uri> Urls => _urls;

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

    /// <summary>
    /// Black-holes every silo connection to and from the instance (<see cref="ClusterSpec.SiloLinks"/>),
    /// both ways, without closing any: it still answers HTTP and reaches the database.
    /// </summary>
    public void CutOff(int instance)
    {
        for (var i = 0; i < _instances.Length; i++)
        {
            var proxy = _siloProxies[i] ?? throw new InvalidOperationException("This cluster's silo traffic does not go through proxies (ClusterSpec.SiloLinks).");
            if (i == instance)
            {
                proxy.Partition();
            }
            else
            {
                proxy.Partition(_instances[instance].SiloAddress);
            }
        }
    }

    /// <summary>Silo traffic flows again, starting with what was held back.</summary>
    public void Reconnect()
    {
        foreach (var proxy in _siloProxies)
        {
            proxy?.Heal();
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

    /// <summary>
    /// SIGSTOP: the process hangs as in a long stop-the-world pause or a VM frozen by its host.
    /// Its sockets stay open and the kernel still accepts connections on its ports; nothing answers.
    /// </summary>
    public void Pause(int instance) => Signal(instance, "-STOP");

    /// <summary>SIGCONT to what <see cref="Pause"/> stopped: it runs on from where it stood.</summary>
    public void Resume(int instance) => Signal(instance, "-CONT");

    /// <summary>Waits up to <paramref name="limit"/> for the instance to exit by itself; whether it did.</summary>
    public async Task<bool> WaitForExitAsync(int instance, TimeSpan limit, CancellationToken cancellationToken)
    {
        if (_instances[instance].Process is not { } process)
        {
            return true;
        }

        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bounded.CancelAfter(limit);
        try
        {
            await process.WaitForExitAsync(bounded.Token);
            return true;
        }
        catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
        {
            return false;
        }
    }

    private void Signal(int instance, string signal)
    {
        if (_instances[instance].Process is { HasExited: false } process)
        {
            using var kill = Process.Start("kill", [signal, process.Id.ToString(CultureInfo.InvariantCulture)]);
            kill.WaitForExit();
        }
    }

    /// <summary>
    /// SIGTERM, as an orchestrator stops a container: the instance drains and hands its pool
    /// grains over (docs/operations.md). Returns how long it took to exit and its exit code.
    /// </summary>
    public async Task<(TimeSpan Took, int ExitCode)> StopAsync(int instance, CancellationToken cancellationToken)
    {
        var process = _instances[instance].Process;
        if (process is not { HasExited: false })
        {
            return (TimeSpan.Zero, process?.ExitCode ?? 0);
        }

        var clock = Stopwatch.StartNew();
        using (var term = Process.Start("kill", ["-TERM", process.Id.ToString(CultureInfo.InvariantCulture)]))
        {
            await term.WaitForExitAsync(cancellationToken);
        }

        if (!await WaitForExitAsync(instance, TimeSpan.FromSeconds(120), cancellationToken))
        {
            Kill(instance);
            throw new InvalidOperationException($"Instance {instance} of cluster {Id} did not exit within 120 s of SIGTERM; see {_logDirectory}/instance-{instance}.log.");
        }

        return (clock.Elapsed, process.ExitCode);
    }

    /// <summary>
    /// The host an instance runs from its next start (an upgrade or a rollback: another release's
    /// <c>Allocator.Host.dll</c>); the instance keeps its ports.
    /// </summary>
    public void UseBuild(int instance, string hostDll) => _builds[instance] = File.Exists(hostDll) ? hostDll : throw new FileNotFoundException("No host at that path.", hostDll);

    /// <summary>The host an instance runs (or runs from its next start).</summary>
    public string BuildOf(int instance) => _builds[instance];

    /// <summary>Starts a stopped instance again (same ports) and waits until it is ready.</summary>
    public Task StartAsync(int instance, CancellationToken cancellationToken) => StartInstanceAsync(instance, cancellationToken);

    public Task RestartAsync(int instance, CancellationToken cancellationToken)
    {
        Kill(instance);
        return StartInstanceAsync(instance, cancellationToken);
    }

    /// <summary>The process id of a running instance.</summary>
    public int? ProcessId(int instance) => _instances[instance].Process is { HasExited: false } process ? process.Id : null;

    /// <summary>The log of an instance (its standard output and error, appended across restarts).</summary>
    public string LogFile(int instance) => Path.Combine(_logDirectory, $"instance-{instance}.log");

    /// <summary>The silo port of an instance (kept across restarts).</summary>
    public int SiloPortOf(int instance) => _instances[instance].SiloPort;

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

    /// <summary>
    /// Starts the instance and waits until it is ready. A port found free can be taken by another
    /// process before the instance binds it (other test runs share the machine): then the
    /// instance moves to new ports and starts again.
    /// </summary>
    private async Task StartInstanceAsync(int index, CancellationToken cancellationToken)
    {
        for (var attempt = 1; ; attempt++)
        {
            var outcome = await TryStartInstanceAsync(index, cancellationToken);
            if (outcome is null)
            {
                return;
            }

            Kill(index);
            if (attempt == 3)
            {
                throw new InvalidOperationException($"Instance {index} of cluster {Id} did not start: {outcome}; see {_logDirectory}/instance-{index}.log.");
            }

            var moved = NewInstance(index);
            if (_siloProxies[index] is { } proxy)
            {
                // The proxy keeps the port the instance advertises; only where it listens moves.
                moved = new Instance(index, moved.HttpPort, _instances[index].SiloPort, moved.SiloAddress, moved.ListenPort);
                proxy.Target = new System.Net.IPEndPoint(moved.SiloAddress, moved.ListenPort);
            }

            _instances[index] = moved;

            _urls[index] = new Uri($"http://127.0.0.1:{moved.HttpPort}/");
        }
    }

    /// <returns>Null when the instance is ready; otherwise why it is not.</returns>
    private async Task<string?> TryStartInstanceAsync(int index, CancellationToken cancellationToken)
    {
        var instance = _instances[index];
        var dll = _builds[index];
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
            .. _spec.SiloLinks
                ? (string[])[
                    $"--Allocator:Cluster:AdvertisedAddress={instance.SiloAddress}",
                    $"--Allocator:Cluster:SiloListenPort={instance.ListenPort}",
                    "--Allocator:Cluster:BindOutgoingToAdvertisedAddress=true"]
                : [],
            $"--Allocator:Storage:Postgres:Schema={Schema}",
            "--Allocator:RateLimit:Disabled=true",
            $"--Allocator:Timeouts:LockTimeout={t.Lock:c}",
            $"--Allocator:Timeouts:CommandTimeout={t.Command:c}",
            $"--Allocator:Timeouts:GrainCallTimeout={t.GrainCall:c}",
            $"--Allocator:Timeouts:RequestTimeout={t.Request:c}",

            // A short drain: nothing in front of the instances follows readiness here.
            "--Allocator:Shutdown:DrainDelay=00:00:02",
            .. ProbingOverrides(),
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
        foreach (var (name, connectionString) in _spec.MoreDatabases ?? [])
        {
            // The same application name: the fault injectors find this instance's backends on every server.
            var more = new NpgsqlConnectionStringBuilder(connectionString) { ApplicationName = connection.ApplicationName, MaxPoolSize = connection.MaxPoolSize };
            start.Environment[$"Allocator__Databases__{name}"] = more.ConnectionString;
        }

        start.Environment["ALLOCATOR_DEMO_KEY"] = ApiKey;
        for (var k = 0; k < BrokerKeys.Length; k++)
        {
            start.Environment[$"Allocator__Auth__ApiKeys__{k}__Name"] = BrokerKeys[k].Tenant;
            start.Environment[$"Allocator__Auth__ApiKeys__{k}__Hash"] = Convert.ToHexStringLower(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(BrokerKeys[k].Key)));
            start.Environment[$"Allocator__Auth__ApiKeys__{k}__Scopes"] = "broker";
            start.Environment[$"Allocator__Auth__ApiKeys__{k}__Tenant"] = BrokerKeys[k].Tenant;
            start.Environment[$"Allocator__Auth__ApiKeys__{k}__Pools"] = "*";
        }

        start.Environment["Logging__LogLevel__Default"] = "Warning";
        start.Environment["Logging__LogLevel__Microsoft.Hosting.Lifetime"] = "Information";
        start.Environment["DOTNET_gcServer"] = "0"; // several instances share two cores
        Directory.CreateDirectory(_logDirectory);
        var log = new StreamWriter(Path.Combine(_logDirectory, $"instance-{index}.log"), append: true) { AutoFlush = true };
        await log.WriteLineAsync($"---- start {TimeProvider.System.GetUtcNow():O} on http port {instance.HttpPort}, silo port {instance.SiloPort}, host {dll}");
        var process = Process.Start(start) ?? throw new InvalidOperationException("dotnet did not start.");
        instance.Process = process;
        instance.Log = log;

        // Ready means this process said it listens on its port (not merely that something on
        // that port answers) and its readiness check passes.
        var listening = $"Now listening on: http://127.0.0.1:{instance.HttpPort}";
        var said = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        void Watch(string line)
        {
            if (line.Contains(listening, StringComparison.Ordinal))
            {
                said.TrySetResult("listening");
            }
            else if (line.Contains("address already in use", StringComparison.OrdinalIgnoreCase) || line.Contains("Hosting failed to start", StringComparison.Ordinal))
            {
                said.TrySetResult("failed: " + line.Trim());
            }
        }

        _ = CopyAsync(process.StandardOutput, log, Watch);
        _ = CopyAsync(process.StandardError, log, Watch);

        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(5) };
        var clock = Stopwatch.StartNew();
        while (true)
        {
            cancellationToken.ThrowIfCancellationRequested();
            if (process.HasExited)
            {
                return $"exited during start-up (exit code {process.ExitCode})";
            }

            if (said.Task.IsCompleted && said.Task.Result != "listening")
            {
                return said.Task.Result;
            }

            if (said.Task.IsCompleted)
            {
                try
                {
                    using var ready = await http.GetAsync(new Uri(Urls[index], "health/ready"), cancellationToken);
                    if (ready.IsSuccessStatusCode)
                    {
                        return null;
                    }
                }
                catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
                {
                    // Not ready yet.
                }
            }

            if (clock.Elapsed > TimeSpan.FromSeconds(120))
            {
                return "not ready after 120 s";
            }

            await Task.Delay(200, cancellationToken);
        }
    }

    /// <summary>
    /// Failure-detection settings to try instead of the host's own, from
    /// <c>ALLOCATOR_FAULTS_PROBING</c> (e.g. <c>ProbeTimeout=00:00:02;NumMissedProbesLimit=3</c>):
    /// any <c>ClusterMembershipOptions</c> property, as <c>Allocator:Cluster:Probing:*</c>.
    /// </summary>
    public static string[] ProbingOverrides() =>
        Environment.GetEnvironmentVariable("ALLOCATOR_FAULTS_PROBING") is { Length: > 0 } probing
            ? [.. probing.Split(';', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(setting => $"--Allocator:Cluster:Probing:{setting}")]
            : [];

    private static async Task CopyAsync(StreamReader from, StreamWriter to, Action<string> watch)
    {
        try
        {
            while (await from.ReadLineAsync() is { } line)
            {
                watch(line);
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

        foreach (var proxy in _siloProxies)
        {
            if (proxy is not null)
            {
                await proxy.DisposeAsync();
            }
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

    /// <summary>The host's build output: <c>src/Allocator.Host/bin/&lt;configuration&gt;/net10.0/Allocator.Host.dll</c>, or ALLOCATOR_HOST_DLL.</summary>
    public static string HostDll()
    {
        if (Environment.GetEnvironmentVariable("ALLOCATOR_HOST_DLL") is { Length: > 0 } configured)
        {
            return configured;
        }

        // The host of the same configuration as this assembly (bin/Release or bin/Debug).
        var configuration = AppContext.BaseDirectory.Contains($"{Path.DirectorySeparatorChar}Debug{Path.DirectorySeparatorChar}", StringComparison.Ordinal) ? "Debug" : "Release";
        var path = Path.Combine(Repository.Root, "src", "Allocator.Host", "bin", configuration, "net10.0", "Allocator.Host.dll");
        return File.Exists(path) ? path : throw new FileNotFoundException($"The host is not built: run 'dotnet build src/Allocator.Host -c {configuration}' first ({path}).");
    }


    /// <summary>Ports (and, with silo links, an address and a listening port of its own) for instance <paramref name="index"/>.</summary>
    private Instance NewInstance(int index)
    {
        if (!_spec.SiloLinks)
        {
            return new Instance(index, FreePort.Next(), FreePort.Next(), System.Net.IPAddress.Loopback, 0);
        }

        var address = new System.Net.IPAddress([127, 0, 0, (byte)(11 + index)]);
        var ports = FreePort.Range(2, address);
        return new Instance(index, FreePort.Next(), ports, address, ports + 1);
    }

    /// <param name="siloPort">The port the silo advertises (with silo links: its proxy's).</param>
    /// <param name="listenPort">With silo links, the port the silo listens on behind its proxy; otherwise 0.</param>
    private sealed class Instance(int index, int httpPort, int siloPort, System.Net.IPAddress siloAddress, int listenPort)
    {
        public System.Net.IPAddress SiloAddress { get; } = siloAddress;

        public int ListenPort { get; } = listenPort;

        public int Index { get; } = index;

        public int HttpPort { get; } = httpPort;

        public int SiloPort { get; } = siloPort;

        public Process? Process { get; set; }

        public StreamWriter? Log { get; set; }
    }
}
