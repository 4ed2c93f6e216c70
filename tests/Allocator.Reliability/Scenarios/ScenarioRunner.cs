using System.Globalization;
using System.Text;
using Allocator.LoadTests.Proxy;
using Allocator.LoadTests.Scale;
using Allocator.Reliability.Checking;
using Allocator.Reliability.Cluster;
using Allocator.Reliability.History;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// The clusters scenarios run on, started on first use and shared by the scenarios of one kind
/// (one after another): the standard cluster, the one on a private PostgreSQL, the one behind the
/// latency proxy, the one with a small connection pool.
/// </summary>
internal sealed class Environments(string mainConnectionString, string artifacts) : IAsyncDisposable
{
    private readonly Dictionary<ClusterKind, (HostCluster Cluster, string Direct, PrivatePostgres? Postgres, IAsyncDisposable? Proxy, string? SecondDirect)> _started = [];
    private readonly SemaphoreSlim _lock = new(1, 1);

    public string Artifacts { get; } = artifacts;

    public async Task<(HostCluster Cluster, string Direct, PrivatePostgres? Postgres, PartitionProxy? Partition, string? SecondDirect, StandbyPair? Standby)> GetAsync(ClusterKind kind, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken);
        try
        {
            if (_started.TryGetValue(kind, out var found))
            {
                return (found.Cluster, found.Direct, found.Postgres, found.Proxy as PartitionProxy, found.SecondDirect, found.Proxy as StandbyPair);
            }

            PrivatePostgres? postgres = null;
            IAsyncDisposable? proxy = null;
            string? secondDirect = null;
            ClusterSpec spec;
            var direct = mainConnectionString;
            switch (kind)
            {
                case ClusterKind.TwoDatabases:
                    // The default database (directory, membership) on the tests' server; "b" on a
                    // server of the scenarios' own, which the scenario stops and starts (issue 23).
                    postgres = await PrivatePostgres.StartAsync(cancellationToken, "faults-b");
                    secondDirect = new Npgsql.NpgsqlConnectionStringBuilder(postgres.ConnectionString) { Pooling = false, ApplicationName = "faults-harness" }.ConnectionString;
                    spec = new ClusterSpec("two", 2, direct, MoreDatabases: [("b", postgres.ConnectionString)]);
                    break;
                case ClusterKind.PrivatePostgres:
                    postgres = await PrivatePostgres.StartAsync(cancellationToken);
                    direct = postgres.ConnectionString;
                    spec = new ClusterSpec("pgr", 2, direct);
                    break;
                case ClusterKind.Latency:
                    var builder = new Npgsql.NpgsqlConnectionStringBuilder(mainConnectionString);
                    var target = new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, builder.Port);
                    var latency = LatencyProxy.Start(target, TimeSpan.FromMilliseconds(30), TimeSpan.FromMilliseconds(15));
                    proxy = latency;
                    builder.Port = latency.EndPoint.Port;
                    spec = new ClusterSpec("lat", 2, builder.ConnectionString);
                    break;
                case ClusterKind.Partition:
                    var viaProxy = new Npgsql.NpgsqlConnectionStringBuilder(mainConnectionString);
                    var partition = PartitionProxy.Start(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, viaProxy.Port));
                    proxy = partition;
                    viaProxy.Port = partition.EndPoint.Port;
                    spec = new ClusterSpec("part", 2, viaProxy.ConnectionString);
                    break;
                case ClusterKind.Upgrade:
                    spec = new ClusterSpec("upg", 3, mainConnectionString, Build: Path.Combine(PreviousRelease.HostDirectory, "Allocator.Host.dll"));
                    break;
                case ClusterKind.Pair:
                    spec = new ClusterSpec("pair", 2, mainConnectionString);
                    break;
                case ClusterKind.SiloLinks:
                    spec = new ClusterSpec("links", 3, mainConnectionString, SiloLinks: true);
                    break;
                case ClusterKind.Standby or ClusterKind.StandbyAsync:
                    // The pair's string names both servers; the harness reads whichever is the
                    // primary through it too, so the checker reads the promoted server.
                    var synchronous = kind == ClusterKind.Standby;
                    var pair = await StandbyPair.StartAsync(synchronous ? "faults-ha" : "faults-ha-async", synchronous, cancellationToken);
                    proxy = pair;
                    direct = pair.ConnectionString + ";Host Recheck Seconds=1";
                    spec = new ClusterSpec(synchronous ? "ha" : "haa", 2, pair.ConnectionString);
                    break;
                case ClusterKind.SiloLinksPair:
                    spec = new ClusterSpec("links2", 2, mainConnectionString, SiloLinks: true);
                    break;
                case ClusterKind.SmallPool:
                    spec = new ClusterSpec("small", 2, mainConnectionString, MaxPoolSize: 3);
                    break;
                default:
                    spec = new ClusterSpec("std", 3, mainConnectionString);
                    break;
            }

            var cluster = await HostCluster.StartAsync(spec, Artifacts, cancellationToken);

            // The checker and the fault injectors open a fresh connection each time: a pooled one
            // may be a connection the last restart or termination broke.
            direct = new Npgsql.NpgsqlConnectionStringBuilder(direct) { Pooling = false, ApplicationName = "faults-harness" }.ConnectionString;
            _started[kind] = (cluster, direct, postgres, proxy, secondDirect);
            return (cluster, direct, postgres, proxy as PartitionProxy, secondDirect, proxy as StandbyPair);
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>Stops the clusters of every other kind (scenarios run grouped by kind; two cores host them all).</summary>
    public async Task KeepOnlyAsync(ClusterKind kind)
    {
        foreach (var other in _started.Keys.Where(k => k != kind).ToList())
        {
            await StopAsync(_started[other]);
            _started.Remove(other);
        }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var started in _started.Values)
        {
            await StopAsync(started);
        }

        _started.Clear();
    }

    private static async Task StopAsync((HostCluster Cluster, string Direct, PrivatePostgres? Postgres, IAsyncDisposable? Proxy, string? SecondDirect) started)
    {
        var (cluster, direct, postgres, proxy, secondDirect) = started;
        {
            await cluster.DisposeAsync();
            // ALLOCATOR_FAULTS_KEEP_SCHEMAS=1 keeps the store's rows to inspect after a violation.
            if (Environment.GetEnvironmentVariable("ALLOCATOR_FAULTS_KEEP_SCHEMAS") != "1")
            {
                await DropSchemaAsync(direct, cluster.Schema);
            }
            if (secondDirect is not null)
            {
                await DropSchemaAsync(secondDirect, cluster.Schema);
            }

            if (proxy is not null)
            {
                await proxy.DisposeAsync();
            }

            if (postgres is not null)
            {
                await postgres.DisposeAsync();
            }
        }
    }

    private static async Task DropSchemaAsync(string connectionString, string schema)
    {
        try
        {
            await using var connection = new Npgsql.NpgsqlConnection(connectionString);
            await connection.OpenAsync();
            await using var drop = new Npgsql.NpgsqlCommand($"DROP SCHEMA IF EXISTS {Faults.Sql.Quote(schema)} CASCADE", connection);
            await drop.ExecuteNonQueryAsync();
        }
        catch (Npgsql.NpgsqlException)
        {
            // Best effort: the next run uses new schemas anyway.
        }
    }
}

/// <summary>One scenario's figures and the checker's verdict.</summary>
internal sealed record ScenarioReport(
    string Name,
    string Proves,
    bool Quick,
    TimeSpan Duration,
    IReadOnlyList<(TimeSpan At, string What)> Faults,
    IReadOnlyDictionary<string, string> Figures,
    CheckReport Check,
    IReadOnlyList<string> ScenarioViolations,
    string HistoryFile,
    IReadOnlySet<Invariant>? Measured = null)
{
    public long Violations => Check.Results.Where(r => Measured?.Contains(r.Invariant) != true).Sum(r => r.Violations) + ScenarioViolations.Count;

    public string ToText()
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"== {Name} ({(Quick ? "quick" : "full")}, {Duration.TotalSeconds:0} s): {Proves}");
        foreach (var (at, what) in Faults)
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"   fault at {at.TotalSeconds,5:0.0} s: {what}");
        }

        foreach (var (name, value) in Figures.OrderBy(f => f.Key, StringComparer.Ordinal))
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"   {name}: {value}");
        }

        text.AppendLine(CultureInfo.InvariantCulture, $"   checked {Check.Allocations:N0} allocations on {Check.Workers:N0} workers:");
        foreach (var result in Check.Results)
        {
            var verdict = result.Violations == 0 ? "ok  " : Measured?.Contains(result.Invariant) == true ? "lost" : "FAIL";
            text.AppendLine(CultureInfo.InvariantCulture, $"   {verdict} {result.Invariant,-20} {(result.NotApplicable ? "n/a" : $"{result.Checked:N0} checked, {result.Violations:N0} violations")}");
            foreach (var sample in result.Samples)
            {
                text.AppendLine(CultureInfo.InvariantCulture, $"          {sample}");
            }
        }

        foreach (var violation in ScenarioViolations)
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"   FAIL scenario: {violation}");
        }

        foreach (var note in Check.Notes)
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"   note: {note}");
        }

        text.AppendLine(CultureInfo.InvariantCulture, $"   history: {HistoryFile}");
        return text.ToString();
    }
}

internal static class ScenarioRunner
{
    public static async Task<ScenarioReport> RunAsync(Scenario scenario, Environments environments, bool quick, CancellationToken cancellationToken)
    {
        await environments.KeepOnlyAsync(scenario.Cluster);
        var (cluster, direct, postgres, partition, secondDirect, standby) = await environments.GetAsync(scenario.Cluster, cancellationToken);
        var history = new HistoryRecorder();
        var context = new ScenarioContext(scenario, quick, cluster, direct, postgres, partition, history, cancellationToken) { SecondDirectConnectionString = secondDirect, Standby = standby };
        var machine = CpuTime.OfMachine();
        var result = await scenario.RunAsync(context);
        var busy = (CpuTime.OfMachine().Busy - machine.Busy) / CpuTime.TicksPerSecond;
        var operations = history.Operations;
        Figures(context, operations);

        // The checker judges pool by pool: a preferred-pools call counts in each pool it may have acted on.
        operations = [.. operations.SelectMany(o => o.PerPool())];

        // What the run cost the machine (every process on it, ours and others'), and the load's pace.
        context.Figure($"machine busy, core-seconds (cores of {Environment.ProcessorCount} on average)", string.Create(CultureInfo.InvariantCulture, $"{busy:0} ({busy / context.Elapsed.TotalSeconds:0.00})"));
        context.Figure("sessions opened at most, per second (quick variant's pace)", context.Pace is { } pace ? pace.PerSecond.ToString("0", CultureInfo.InvariantCulture) : "no pace");
        CheckReport check;
        if (result.Databases is { } databases)
        {
            // Several databases (issue 23): the checker on each, with the calls of that database's pools.
            check = new CheckReport();
            foreach (var (name, connectionString, pools) in databases)
            {
                var mine = operations.Where(o => pools.Contains(o.Pool)).ToList();
                var checker = new Checker(connectionString, cluster.Schema, cluster.Timeouts, TimeSpan.FromSeconds(1));
                check.Add(name, await checker.CheckAsync(mine, pools, result.Expectations, cancellationToken));
            }
        }
        else
        {
            var checker = new Checker(direct, cluster.Schema, cluster.Timeouts, TimeSpan.FromSeconds(1));
            check = await checker.CheckAsync(operations, result.Pools, result.Expectations, cancellationToken);
        }
        var file = Path.Combine(environments.Artifacts, "history", $"{scenario.Name}-{(quick ? "quick" : "full")}.jsonl");
        await history.WriteAsync(file);
        return new ScenarioReport(scenario.Name, scenario.Proves, quick, context.Elapsed, [.. context.Faults], context.Figures, check, context.ScenarioViolations, file, result.Measured);
    }

    /// <summary>What every scenario reports: operations by outcome, allocation latency, 5xx by kind.</summary>
    private static void Figures(ScenarioContext context, IReadOnlyList<Operation> operations)
    {
        var allocations = operations.Where(o => o.Kind == OperationKind.Allocate).ToList();
        context.Figure("operations", $"{operations.Count:N0} ({string.Join(", ", operations.GroupBy(o => o.Outcome).OrderBy(g => g.Key).Select(g => $"{g.Key.ToString().ToLowerInvariant()} {g.Count():N0}"))})");
        if (allocations.Count > 0)
        {
            var ok = allocations.Where(o => o.Outcome == Outcome.Ok).Select(o => o.Duration.TotalMilliseconds).Order().ToList();
            context.Figure("allocate calls", $"{allocations.Count:N0}: ok {ok.Count:N0}, {string.Join(", ", allocations.Where(o => o.Outcome != Outcome.Ok).GroupBy(o => o.Problem ?? o.Outcome.ToString()).OrderBy(g => g.Key, StringComparer.Ordinal).Select(g => $"{g.Key} {g.Count():N0}"))}");
            if (ok.Count > 0)
            {
                context.Figure("allocate ok latency ms (p50 / p99 / max)", $"{Percentile(ok, 0.5):0} / {Percentile(ok, 0.99):0} / {ok[^1]:0}");
            }
        }

        var fiveHundreds = operations.Where(o => o.Status >= 500).GroupBy(o => $"{o.Status} {o.Problem}").ToList();
        context.Figure("5xx answers", fiveHundreds.Count == 0 ? "none" : string.Join(", ", fiveHundreds.Select(g => $"{g.Key} x{g.Count():N0}")));
        var noAnswer = operations.Count(o => o.Status == 0 && o.Problem != Workload.ApiClient.Refused);
        if (noAnswer > 0)
        {
            context.Figure("calls without an answer", $"{noAnswer:N0} ({operations.Count(o => o.ClientTimeout):N0} client timeouts, the rest connections reset or closed mid-answer)");
        }

        var refused = operations.Count(o => o.Problem == Workload.ApiClient.Refused);
        if (refused > 0)
        {
            context.Figure("connections refused (the caller went to another instance)", $"{refused:N0}");
        }
    }

    private static double Percentile(List<double> sorted, double q) => sorted[Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1)];
}
