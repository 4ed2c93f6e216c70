using System.Collections.Concurrent;
using System.Globalization;
using Allocator.Reliability.Checking;
using Allocator.Reliability.Cluster;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>Which cluster a scenario runs on (clusters of one kind are shared by the scenarios that need that kind, one after another).</summary>
internal enum ClusterKind
{
    /// <summary>Three instances on the tests' PostgreSQL.</summary>
    Standard,

    /// <summary>Two instances on a PostgreSQL of the scenarios' own, which they may stop and restart.</summary>
    PrivatePostgres,

    /// <summary>Two instances reaching the tests' PostgreSQL through the latency proxy (RTT 30 ms, each way 15 ms ± 15 ms).</summary>
    Latency,

    /// <summary>Two instances on the tests' PostgreSQL: a cluster whose one survivor's vote alone declares the other dead.</summary>
    Pair,

    /// <summary>Two instances with at most 3 database connections each (one of them the LISTEN connection).</summary>
    SmallPool,

    /// <summary>Two instances reaching the tests' PostgreSQL through a proxy that can black-hole the path (<see cref="PartitionProxy"/>).</summary>
    Partition,

    /// <summary>
    /// Two instances on two databases (issue 23): the default on the tests' PostgreSQL, <c>b</c> on a
    /// PostgreSQL of the scenarios' own (<see cref="ScenarioContext.Postgres"/>), which they may stop.
    /// </summary>
    TwoDatabases,

    /// <summary>
    /// Three instances on the tests' PostgreSQL, started on the previous release (built from git
    /// history, eng/previous-release.sh); the scenario moves them to this build and back (issue 38).
    /// </summary>
    Upgrade,

    /// <summary>
    /// Three instances on the tests' PostgreSQL whose silo traffic goes through a proxy per
    /// instance, so that one silo can be cut off from the others (issue 47, <see cref="HostCluster.CutOff"/>).
    /// </summary>
    SiloLinks,

    /// <summary>
    /// Two instances whose silo traffic goes through a proxy each (<see cref="SiloLinks"/>): cut
    /// apart, each suspects the other, and the membership table decides which one is dead.
    /// </summary>
    SiloLinksPair,

    /// <summary>
    /// Two instances on a primary and its synchronous streaming standby of the scenarios' own
    /// (<see cref="StandbyPair"/>), through one connection string naming both (issue 48).
    /// </summary>
    Standby,

    /// <summary>As <see cref="Standby"/>, with an asynchronous standby (issue 48: what a failover to it loses).</summary>
    StandbyAsync,
}

/// <summary>One fault scenario: bounded in time, loopback only, ending with the checker.</summary>
internal abstract class Scenario
{
    public abstract string Name { get; }

    /// <summary>One sentence: the fault, and what the scenario proves.</summary>
    public abstract string Proves { get; }

    public virtual ClusterKind Cluster => ClusterKind.Standard;

    /// <summary>
    /// Whether CI runs the quick variant. A scenario that measures rather than checks, and whose
    /// outcome depends on how busy the machine is, runs only through eng/faults.sh.
    /// </summary>
    public virtual bool InContinuousIntegration => true;

    /// <summary>
    /// Whether the scenario's checks are timed second by second (a database's pools while another
    /// is out, readiness in a partition): in CI it runs alone, with nothing else on the machine's
    /// cores but what it starts itself, so that what it measures is the service, not its neighbours.
    /// </summary>
    public virtual bool TimedSecondBySecond => false;

    /// <summary>
    /// In the quick variant, how many sessions a second the scenario's brokers open at most, all
    /// together (<see cref="SessionPace"/>, ADR 0030); null: as many as the machine answers. The
    /// full variants are never paced.
    /// </summary>
    public virtual double? QuickSessionsPerSecond => 40;

    /// <summary>Runs the workload and the faults; returns the pools to check and what the checker may assume.</summary>
    public abstract Task<ScenarioResult> RunAsync(ScenarioContext context);

    public override string ToString() => Name;
}

/// <param name="Databases">With several databases (issue 23): each database's name, direct connection string and pools; the checker runs on each.</param>
/// <param name="Measured">
/// Invariants the scenario breaks on purpose and measures (an asynchronous standby's failover
/// loses answered work, issue 48): their violations are reported as losses, not judged.
/// </param>
internal sealed record ScenarioResult(IReadOnlyCollection<string> Pools, Expectations Expectations, IReadOnlyList<(string Name, string ConnectionString, IReadOnlyCollection<string> Pools)>? Databases = null, IReadOnlySet<Invariant>? Measured = null);

/// <summary>What a scenario has to work with, and where it reports faults and figures.</summary>
internal sealed class ScenarioContext(Scenario scenario, bool quick, HostCluster cluster, string directConnectionString, PrivatePostgres? postgres, PartitionProxy? partition, HistoryRecorder history, CancellationToken cancellation)
{
    private readonly ConcurrentQueue<(TimeSpan At, string What)> _faults = new();
    private readonly ConcurrentDictionary<string, string> _figures = new();
    private readonly System.Diagnostics.Stopwatch _clock = System.Diagnostics.Stopwatch.StartNew();
    private readonly string _run = Guid.NewGuid().ToString("N")[..6];

    public bool Quick { get; } = quick;

    public HostCluster Cluster { get; } = cluster;

    /// <summary>The cluster's database, directly (never through the proxy): for the checker and for faults.</summary>
    public string DirectConnectionString { get; } = directConnectionString;

    public PrivatePostgres? Postgres { get; } = postgres;

    /// <summary>With <see cref="ClusterKind.TwoDatabases"/>: database <c>b</c>, directly (the checker's connection).</summary>
    public string? SecondDirectConnectionString { get; init; }

    public PartitionProxy? Partition { get; } = partition;

    /// <summary>The primary and its standby (<see cref="ClusterKind.Standby"/>), or null.</summary>
    public StandbyPair? Standby { get; init; }

    public HistoryRecorder History { get; } = history;

    public CancellationToken Cancellation { get; } = cancellation;

    /// <summary>Other conditions the scenario checked itself (e.g. readiness during an outage), reported with the invariants.</summary>
    public List<string> ScenarioViolations { get; } = [];

    public IEnumerable<(TimeSpan At, string What)> Faults => _faults;

    public IReadOnlyDictionary<string, string> Figures => _figures;

    public TimeSpan Elapsed => _clock.Elapsed;

    /// <summary>The quick (CI) or the full value.</summary>
    public T Pick<T>(T quickValue, T fullValue) => Quick ? quickValue : fullValue;

    public string Pool(string suffix) => $"{scenario.Name}-{_run}-{suffix}";

    /// <summary>The pace the scenario's brokers keep (the quick variant's, <see cref="Scenario.QuickSessionsPerSecond"/>); null: none.</summary>
    public SessionPace? Pace { get; } = quick && scenario.QuickSessionsPerSecond is { } rate ? new SessionPace(rate) : null;

    /// <summary>A client with the admin key; <see cref="Brokers"/> opening sessions through it keep the scenario's <see cref="Pace"/>.</summary>
    public ApiClient NewClient(string name, TimeSpan timeout) => new(name, History, Cluster.Urls, HostCluster.ApiKey, timeout) { Pace = Pace };

    /// <summary>A client with broker key <paramref name="broker"/> of <see cref="HostCluster.BrokerKeys"/> (its own tenant), keeping the scenario's <see cref="Pace"/>.</summary>
    public ApiClient NewBrokerClient(int broker, string name, TimeSpan timeout) =>
        new(name, History, Cluster.Urls, HostCluster.BrokerKeys[broker].Key, timeout, HostCluster.BrokerKeys[broker].Tenant) { Pace = Pace };

    public void Fault(string what) => _faults.Enqueue((_clock.Elapsed, what));

    public void Figure(string name, string value) => _figures[name] = value;

    public void Figure(string name, double value, string format = "0.0") => _figures[name] = value.ToString(format, CultureInfo.InvariantCulture);

    /// <summary>Creates a pool and registers its workers (w0…), retrying until the service says yes.</summary>
    public async Task SetUpPoolAsync(string pool, string settingsJson, int workers, int capacity, IReadOnlyList<string>? tags = null)
    {
        using var admin = NewClient("setup", TimeSpan.FromSeconds(30));
        await RetryAsync(() => admin.PutPoolAsync(0, pool, settingsJson));
        for (var first = 0; first < workers; first += 1000)
        {
            var batch = Enumerable.Range(first, Math.Min(1000, workers - first)).Select(i => ($"w{i}", capacity)).ToList();
            await RetryAsync(() => admin.RegisterBatchAsync(0, pool, batch));
        }

        if (tags is not null)
        {
            // Tags go through single registrations (the batch body above carries none).
            for (var i = 0; i < workers; i++)
            {
                var id = $"w{i}";
                await RetryAsync(() => admin.RegisterAsync(0, pool, id, capacity, tags));
            }
        }
    }

    public async Task RetryAsync(Func<Task<Operation>> call)
    {
        for (var attempt = 0; ; attempt++)
        {
            var op = await call();
            if (op.Outcome == Outcome.Ok)
            {
                return;
            }

            if (attempt > 50)
            {
                throw new InvalidOperationException($"Set-up call kept failing: {op} {op.Detail}");
            }

            await Task.Delay(200, Cancellation);
        }
    }

    /// <summary>Waits, unless the whole run is being cancelled.</summary>
    public Task Delay(TimeSpan delay) => Task.Delay(delay, Cancellation);
}
