using Allocator.Reliability.Cluster;
using Allocator.Reliability.Scenarios;
using Allocator.Testing;
using Xunit.Abstractions;
using Xunit.Sdk;

namespace Allocator.Reliability.Tests;

/// <summary>
/// The quick variant of every fault scenario meant for CI (eng/faults.sh runs the full ones, and
/// busy-cores, a measurement left out of CI): real host processes on PostgreSQL, faults
/// injected, then the checker reads the database. Any violation of any invariant fails the
/// scenario; its report (faults, figures, verdict per invariant, the history file) is the
/// test's output.
/// </summary>
/// <remarks>
/// The scenarios run in two lanes side by side, each with clusters of its own: the standard
/// cluster's lane, and the lane of the clusters with their own servers and proxies. Their phases
/// are timed, not counted, so two lanes halve the wall time; within a lane the scenarios run in
/// the catalogue's order, so each kind of cluster starts once.
/// </remarks>
public abstract class QuickScenarioTests(ScenarioEnvironments environments, ITestOutputHelper output)
{
    internal static TheoryData<string> InLane(bool standardLane) =>
        [.. ScenarioCatalogue.All.Where(s => s.InContinuousIntegration && IsStandardLane(s.Cluster) == standardLane).Select(s => s.Name)];

    /// <summary>The standard cluster (three instances) and the latency proxy's: the lane of the tests' own PostgreSQL, direct or delayed.</summary>
    internal static bool IsStandardLane(ClusterKind kind) => kind is ClusterKind.Standard or ClusterKind.Latency;

    /// <summary>
    /// The scenarios that stop instances gracefully and allow no reset connection: they run while
    /// the other lane waits. With both lanes storming a saturated machine, an instance's stop once
    /// left a request on a closing keep-alive connection unanswered (a reset) in the upgrade.
    /// </summary>
    private static readonly HashSet<string> RunAlone = ["upgrade", "rolling-restart"];

    /// <summary>One permit per lane; a scenario that runs alone takes both (one such scenario at a time).</summary>
    private static readonly SemaphoreSlim Lanes = new(2, 2);
    private static readonly SemaphoreSlim Alone = new(1, 1);

    protected async Task RunAsync(string name)
    {
        using var turn = new CancellationTokenSource(TimeSpan.FromMinutes(5));
        var alone = RunAlone.Contains(name);
        if (alone)
        {
            await Alone.WaitAsync(turn.Token);
            await Lanes.WaitAsync(turn.Token);
        }

        await Lanes.WaitAsync(turn.Token);
        ScenarioReport report;
        try
        {
            using var timeout = new CancellationTokenSource(TimeSpan.FromMinutes(3));
            report = await ScenarioRunner.RunAsync(ScenarioCatalogue.Get(name), environments.Environments, quick: true, timeout.Token);
        }
        finally
        {
            Lanes.Release(alone ? 2 : 1);
            if (alone)
            {
                Alone.Release();
            }
        }

        output.WriteLine(report.ToText());

        report.Check.Allocations.Should().BeGreaterThan(0, "the scenario must have allocated something to check");
        report.Violations.Should().Be(0, report.ToText());
    }
}

/// <summary>The scenarios on the standard cluster and behind the latency proxy.</summary>
[Collection(StandardLane.Name)]
[TestCaseOrderer(CatalogueOrder.TypeName, CatalogueOrder.Assembly)]
public sealed class StandardClusterScenarioTests(StandardLane lane, ITestOutputHelper output) : QuickScenarioTests(lane, output)
{
    public static TheoryData<string> Names() => InLane(standardLane: true);

    [Theory]
    [MemberData(nameof(Names))]
    public Task Scenario_Quick_NoInvariantViolated(string name) => RunAsync(name);
}

/// <summary>The scenarios on clusters with servers or proxies of their own: restarts, partitions, two databases, the upgrade.</summary>
[Collection(OwnServersLane.Name)]
[TestCaseOrderer(CatalogueOrder.TypeName, CatalogueOrder.Assembly)]
public sealed class OwnServersScenarioTests(OwnServersLane lane, ITestOutputHelper output) : QuickScenarioTests(lane, output)
{
    public static TheoryData<string> Names() => InLane(standardLane: false);

    [Theory]
    [MemberData(nameof(Names))]
    public Task Scenario_Quick_NoInvariantViolated(string name) => RunAsync(name);
}

/// <summary>The clusters one lane of scenarios shares (started on first use, one kind at a time).</summary>
public abstract class ScenarioEnvironments(string lane) : IAsyncLifetime
{
    internal Environments Environments { get; private set; } = null!;

    public Task InitializeAsync()
    {
        var connectionString = Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES") is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException("ALLOCATOR_POSTGRES is not set: start PostgreSQL with eng/postgres.sh (eng/test.sh does).");
        Environments = new Environments(connectionString, Path.Combine(Repository.Root, "artifacts", "faults-ci", lane));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync() => await Environments.DisposeAsync();
}

public sealed class StandardLane() : ScenarioEnvironments("standard")
{
    public const string Name = "fault scenarios: the standard cluster";
}

public sealed class OwnServersLane() : ScenarioEnvironments("own-servers")
{
    public const string Name = "fault scenarios: own servers and proxies";
}

[CollectionDefinition(StandardLane.Name)]
public sealed class StandardLaneCollection : ICollectionFixture<StandardLane>;

[CollectionDefinition(OwnServersLane.Name)]
public sealed class OwnServersLaneCollection : ICollectionFixture<OwnServersLane>;

/// <summary>Runs a lane's scenarios in the catalogue's order, which groups them by the cluster they need.</summary>
public sealed class CatalogueOrder : ITestCaseOrderer
{
    public const string TypeName = "Allocator.Reliability.Tests.CatalogueOrder";
    public const string Assembly = "Allocator.Reliability.Tests";

    public IEnumerable<TTestCase> OrderTestCases<TTestCase>(IEnumerable<TTestCase> testCases)
        where TTestCase : ITestCase =>
        testCases.OrderBy(c => c.TestMethodArguments is [string name] ? Position(name) : (-1, -1));

    /// <summary>First the catalogue's place of the scenario's kind of cluster, then its own.</summary>
    private static (int Cluster, int Scenario) Position(string name)
    {
        var all = ScenarioCatalogue.All.ToList();
        var scenario = all.FindIndex(s => s.Name == name);
        return (all.FindIndex(s => s.Cluster == all[scenario].Cluster), scenario);
    }
}
