using System.Collections.Concurrent;
using System.Diagnostics;
using Allocator.Client;
using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Integration;
using Allocator.Networking;
using Npgsql;

namespace Allocator.LoadTests.Scale;

/// <summary>A configuration of the scale workload: host processes × PostgreSQL servers (one database each).</summary>
/// <param name="Pools">Pools of this configuration; null: the run's size (many). One pool makes every caller share one grain: the batch-size probe of the model.</param>
internal sealed record ScaleConfiguration(int Hosts, int Databases, int? Pools = null)
{
    public override string ToString() => $"{Hosts} host{(Hosts == 1 ? "" : "s")} × {Databases} PostgreSQL{(Pools is { } p ? $", {p} pool{(p == 1 ? "" : "s")}" : "")}";
}

/// <summary>The sizes of a scale run.</summary>
internal sealed record ScaleSize(int Pools, int WorkersPerPool, int Capacity, int Callers, TimeSpan WarmUp, TimeSpan Measure, int Rounds)
{
    // Three interleaved rounds of five configurations stay under ten minutes on two shared cores.
    public static ScaleSize Full { get; } = new(64, 20, 1_000, 64, TimeSpan.FromSeconds(6), TimeSpan.FromSeconds(15), 3);

    public static ScaleSize Quick { get; } = new(16, 20, 1_000, 64, TimeSpan.FromSeconds(4), TimeSpan.FromSeconds(8), 1);
}

/// <summary>CPU seconds spent by one process (or one PostgreSQL server with all its processes).</summary>
internal sealed record ProcessCpu(string Name, double Seconds);

/// <summary>What one configuration measured.</summary>
/// <param name="Allocations">Allocate + release steps completed in the measured window.</param>
/// <param name="Processes">CPU in the measured window, by process: host-0…, pg-a, pg-b, load generator.</param>
/// <param name="OthersCores">CPU the machine spent on everything else during the window, in cores.</param>
/// <param name="BatchSizes">Allocations per allocate_batch call, by database (approximate: PostgreSQL's function statistics).</param>
internal sealed record ScaleMeasurement(
    ScaleConfiguration Configuration,
    int Round,
    long Allocations,
    double Seconds,
    LatencyStatistics Allocate,
    IReadOnlyList<ProcessCpu> Processes,
    double OthersCores,
    int Cpus,
    IReadOnlyDictionary<string, double> BatchSizes,
    IReadOnlyDictionary<string, AuditResult> Audits,
    long Errors)
{
    public double Throughput => Allocations / Seconds;

    /// <summary>CPU per allocation, in µs, of one process (all its CPU in the window).</summary>
    public double MicrosPerAllocation(ProcessCpu process) => Allocations == 0 ? 0 : process.Seconds * 1e6 / Allocations;

    public double OursCores => Processes.Sum(p => p.Seconds) / Seconds;
}

/// <summary>
/// One configuration of <c>eng/storm.sh scale</c>: its host processes on the harness's PostgreSQL
/// servers (a fresh schema), pools placed over the databases by the service's own rule, callers
/// spread over the instances (allocate, then release, closed loop), CPU read from <c>/proc</c>
/// around the measured window, then the invariant audit on every database.
/// </summary>
internal sealed class ScaleRun(ScaleConfiguration configuration, ScaleSize size, IReadOnlyList<ScaleCluster> clusters, TextWriter progress)
{
    private const int MaxConnectionsPerHost = 40;

    public async Task<ScaleMeasurement> RunAsync(int round, CancellationToken cancellationToken)
    {
        var run = Guid.NewGuid().ToString("N")[..8];
        var schema = "sc_" + run;
        var databases = clusters.Take(configuration.Databases).ToList();
        var hosts = new List<HostProcess>();
        try
        {
            for (var i = 0; i < configuration.Hosts; i++)
            {
                hosts.Add(HostProcess.Start(HostArgs(i, run, schema, databases)));
                if (i == 0)
                {
                    await hosts[0].WaitReadyAsync(cancellationToken); // migrates alone, the others then start together
                }
            }

            foreach (var host in hosts.Skip(1))
            {
                await host.WaitReadyAsync(cancellationToken);
            }

            var clients = hosts.Select(h => new AllocatorClient(h.Http)).ToList();
            var pools = await ProvisionAsync(clients[0], run, cancellationToken);
            progress.WriteLine($"scale: {configuration}, round {round}: {pools.Count} pools ({string.Join(", ", pools.GroupBy(p => p.Value).Select(g => $"{g.Count()} on {g.Key}"))}), {size.Callers} callers over {hosts.Count} instance(s)");

            // Warmed up (JIT, connection pools, grains) under the same load, then measured. All CPU
            // in the window counts, the processes' own background work (timers, membership,
            // autovacuum, the JIT's late recompilations) included.
            var window = new Window();
            var batchesBefore = new Dictionary<string, long>();
            CpuSample? start = null;
            CpuSample? end = null;
            await LoadAsync(clients, pools, window, cancellationToken, async () =>
            {
                await Task.Delay(size.WarmUp, cancellationToken);
                batchesBefore = await BatchCallsAsync(databases, schema, cancellationToken);
                start = Sample(hosts, databases);
                window.Open();
                await Task.Delay(size.Measure, cancellationToken);
                window.Close();
                end = Sample(hosts, databases);
            });
            var cpu = end!.Since(start!);

            // PostgreSQL publishes function statistics about a second after the calls.
            await Task.Delay(TimeSpan.FromSeconds(1.5), cancellationToken);
            var batchesAfter = await BatchCallsAsync(databases, schema, cancellationToken);
            var audits = await AuditAsync(databases, schema, pools, window, cancellationToken);
            var allocationsPerDatabase = window.AllocationsByPool.GroupBy(p => pools[p.Key]).ToDictionary(g => g.Key, g => g.Sum(p => p.Value));
            var batchSizes = databases.ToDictionary(
                d => d.Name,
                d => batchesAfter[d.Name] - batchesBefore[d.Name] is > 0 and var calls ? allocationsPerDatabase.GetValueOrDefault(d.Name) / (double)calls : 0);

            var seconds = cpu.Wall.TotalSeconds;
            var processes = cpu.Processes.Select(p => new ProcessCpu(p.Name, p.Seconds)).ToList();
            return new ScaleMeasurement(
                configuration,
                round,
                window.Allocations,
                seconds,
                LatencyStatistics.FromSorted([.. window.Latencies.Order()]),
                processes,
                Math.Max(0, cpu.MachineSeconds - processes.Sum(p => p.Seconds)) / seconds,
                cpu.Cpus,
                batchSizes,
                audits,
                window.Errors);
        }
        finally
        {
            await HostProcess.StopAllAsync(hosts);
        }
    }

    private string[] HostArgs(int index, string run, string schema, IReadOnlyList<ScaleCluster> databases)
    {
        List<string> args =
        [
            "--Allocator:Auth:Disabled=true", "--Allocator:RateLimit:Disabled=true",
            $"--ConnectionStrings:Allocator={Connection(databases[0], index)}",
            $"--Allocator:Storage:Postgres:Schema={schema}",
            $"--Allocator:Cluster:SiloPort={FreePort.Next()}",
        ];
        foreach (var database in databases.Skip(1))
        {
            args.Add($"--Allocator:Databases:{database.Name}={Connection(database, index)}");
        }

        if (configuration.Hosts > 1)
        {
            args.AddRange(["--Allocator:Cluster:Membership=postgres", $"--Allocator:Cluster:ClusterId=scale-{run}", $"--Allocator:Cluster:MembershipSchema=cluster_{run}"]);
        }

        return [.. args];
    }

    private static string Connection(ScaleCluster cluster, int host) =>
        new NpgsqlConnectionStringBuilder(cluster.ConnectionString) { MaxPoolSize = MaxConnectionsPerHost, ApplicationName = $"scale-h{host}" }.ConnectionString;

    /// <summary>Creates the pools through the service (its placement rule spreads them) and registers their workers; pool → database.</summary>
    private async Task<Dictionary<string, string>> ProvisionAsync(AllocatorClient client, string run, CancellationToken cancellationToken)
    {
        var pools = new Dictionary<string, string>(StringComparer.Ordinal);
        for (var p = 0; p < (configuration.Pools ?? size.Pools); p++)
        {
            var pool = $"scale-{run}-{p}";
            var info = await client.PutPoolAsync(pool, new Client.PoolSettings { DefaultLeaseSeconds = 600 }, cancellationToken);
            pools[pool] = info.Database ?? ScaleCluster.DefaultName;
            await client.RegisterWorkersAsync(pool, [.. Enumerable.Range(0, size.WorkersPerPool).Select(w => new WorkerBatchEntry($"w{w:D3}", $"10.1.{p % 250}.{w}:7000", size.Capacity))], cancellationToken);
        }

        return pools;
    }

    /// <summary>The callers, until <paramref name="during"/> is done.</summary>
    private async Task LoadAsync(IReadOnlyList<AllocatorClient> clients, Dictionary<string, string> pools, Window window, CancellationToken cancellationToken, Func<Task> during)
    {
        using var stop = new CancellationTokenSource();
        var names = pools.Keys.ToArray();
        var phase = Guid.NewGuid().ToString("N")[..6]; // idempotency keys of their own in every phase
        var callers = Enumerable.Range(0, size.Callers).Select(i => Task.Run(() => CallerAsync(i, phase, clients, names, window, stop.Token), CancellationToken.None)).ToList();
        try
        {
            await during();
        }
        finally
        {
            await stop.CancelAsync();
            await Task.WhenAll(callers);
        }
    }

    /// <summary>One caller: allocate on a random pool through its instance, release, again; counted while the window is open.</summary>
    private static async Task CallerAsync(int index, string phase, IReadOnlyList<AllocatorClient> clients, string[] pools, Window window, CancellationToken stop)
    {
        var client = clients[index % clients.Count];
        var random = new Random(HashCode.Combine(phase, index));
        for (var step = 0; !stop.IsCancellationRequested; step++)
        {
            var pool = pools[random.Next(pools.Length)];
            var started = Stopwatch.GetTimestamp();
            try
            {
                var result = await client.AllocateAsync(pool, new AllocateRequest(), $"{phase}-c{index}-{step}", CancellationToken.None);
                var elapsed = Stopwatch.GetElapsedTime(started);
                if (result.Allocation is not { } allocation)
                {
                    window.Error();
                    continue;
                }

                window.Allocated(pool, allocation.AllocationId, elapsed);
                await client.ReleaseAsync(pool, allocation.AllocationId, allocation.Epoch, CancellationToken.None);
            }
            catch (Exception ex) when (ex is AllocatorApiException or HttpRequestException or TaskCanceledException)
            {
                window.Error();
            }
        }
    }

    private CpuSample Sample(IReadOnlyList<HostProcess> hosts, IReadOnlyList<ScaleCluster> databases)
    {
        var ticks = new List<(string, long)>();
        for (var i = 0; i < hosts.Count; i++)
        {
            ticks.Add(($"host-{i}", CpuTime.OfProcess(hosts[i].Process.Id)));
        }

        foreach (var database in databases)
        {
            ticks.Add(($"pg-{database.Name}", CpuTime.OfPostgres(database.PostmasterPid)));
        }

        ticks.Add(("load generator", CpuTime.OfProcess(Environment.ProcessId)));
        var (machine, cpus) = CpuTime.OfMachine();
        return new CpuSample(Stopwatch.GetTimestamp(), ticks, machine, cpus);
    }

    private static async Task<Dictionary<string, long>> BatchCallsAsync(IReadOnlyList<ScaleCluster> databases, string schema, CancellationToken cancellationToken)
    {
        var calls = new Dictionary<string, long>(StringComparer.Ordinal);
        foreach (var database in databases)
        {
            await using var connection = new NpgsqlConnection(database.ConnectionString);
            await connection.OpenAsync(cancellationToken);
            await using var command = new NpgsqlCommand(ScaleCluster.Sql("batch-calls.sql"), connection);
            command.Parameters.Add(new NpgsqlParameter { Value = schema });
            calls[database.Name] = (long)(await command.ExecuteScalarAsync(cancellationToken))!;
        }

        return calls;
    }

    /// <summary>The SQL invariant audit on every database, with the replies of that database's pools.</summary>
    private static async Task<Dictionary<string, AuditResult>> AuditAsync(IReadOnlyList<ScaleCluster> databases, string schema, Dictionary<string, string> pools, Window window, CancellationToken cancellationToken)
    {
        var audits = new Dictionary<string, AuditResult>(StringComparer.Ordinal);
        foreach (var database in databases)
        {
            await using var dataSource = NpgsqlDataSource.Create(database.ConnectionString);
            var replies = window.Replies.Where(r => pools[r.Pool] == database.Name).Select(r => r.Id).ToList();
            audits[database.Name] = await PostgresInvariantAudit.AuditAsync(dataSource, schema, poolId: null, replies, cancellationToken);
        }

        return audits;
    }

    /// <summary>What the callers record: counted only while open, replies always (for the audit).</summary>
    private sealed class Window
    {
        private volatile bool _open;
        private long _allocations;
        private long _errors;

        public ConcurrentBag<double> Latencies { get; } = [];

        public ConcurrentBag<(string Pool, Guid Id)> Replies { get; } = [];

        public ConcurrentDictionary<string, long> AllocationsByPool { get; } = new(StringComparer.Ordinal);

        public long Allocations => Interlocked.Read(ref _allocations);

        public long Errors => Interlocked.Read(ref _errors);

        public void Open() => _open = true;

        public void Close() => _open = false;

        public void Allocated(string pool, Guid id, TimeSpan elapsed)
        {
            Replies.Add((pool, id));
            if (_open)
            {
                Interlocked.Increment(ref _allocations);
                AllocationsByPool.AddOrUpdate(pool, 1, (_, n) => n + 1);
                Latencies.Add(elapsed.TotalMilliseconds);
            }
        }

        public void Error()
        {
            if (_open)
            {
                Interlocked.Increment(ref _errors);
            }
        }
    }

    private sealed record CpuSample(long Timestamp, IReadOnlyList<(string Name, long Ticks)> Ticks, long MachineTicks, int Cpus)
    {
        public CpuDelta Since(CpuSample earlier)
        {
            var wall = Stopwatch.GetElapsedTime(earlier.Timestamp, Timestamp);
            var before = earlier.Ticks.ToDictionary(t => t.Name, t => t.Ticks);
            return new CpuDelta(
                wall,
                [.. Ticks.Select(t => (t.Name, (t.Ticks - before.GetValueOrDefault(t.Name)) / CpuTime.TicksPerSecond))],
                (MachineTicks - earlier.MachineTicks) / CpuTime.TicksPerSecond,
                Cpus);
        }
    }

    private sealed record CpuDelta(TimeSpan Wall, IReadOnlyList<(string Name, double Seconds)> Processes, double MachineSeconds, int Cpus);
}
