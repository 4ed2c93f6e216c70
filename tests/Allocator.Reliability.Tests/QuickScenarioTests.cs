using System.Globalization;
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
/// the catalogue's order, so each kind of cluster starts once. The scenarios timed second by
/// second have a third lane, trait <c>Lane=timed</c>, and run alone: eng/test.sh runs them
/// before anything else starts, and here they take both lanes' turns.
/// </remarks>
public abstract class QuickScenarioTests(ScenarioEnvironments environments, ITestOutputHelper output)
{
    internal static TheoryData<string> InLane(bool standardLane) =>
        [.. ScenarioCatalogue.All.Where(s => s.InContinuousIntegration && !s.TimedSecondBySecond && IsStandardLane(s.Cluster) == standardLane).Select(s => s.Name)];

    internal static TheoryData<string> Timed() =>
        [.. ScenarioCatalogue.All.Where(s => s.InContinuousIntegration && s.TimedSecondBySecond).Select(s => s.Name)];

    /// <summary>The standard cluster (three instances) and the latency proxy's: the lane of the tests' own PostgreSQL, direct or delayed.</summary>
    internal static bool IsStandardLane(ClusterKind kind) => kind is ClusterKind.Standard or ClusterKind.Latency;

    /// <summary>
    /// The scenarios that stop instances gracefully and allow no reset connection: they run while
    /// the other lane waits. With both lanes storming a saturated machine, an instance's stop once
    /// left a request on a closing keep-alive connection unanswered (a reset) in the upgrade.
    /// </summary>
    private static readonly HashSet<string> RunAlone = ["upgrade", "rolling-restart"];

    /// <summary>
    /// How many lanes run at once: two, unless eng/test.sh found room for only one test assembly
    /// at a time (ALLOCATOR_TEST_SLOTS, eng/calibrate.sh): then the machine has no core to spare
    /// for a second cluster under load either.
    /// </summary>
    internal static int LanesAtOnce { get; } =
        int.TryParse(Environment.GetEnvironmentVariable("ALLOCATOR_TEST_SLOTS"), CultureInfo.InvariantCulture, out var slots) && slots < 2 ? 1 : 2;

    /// <summary>One permit per lane; a scenario that runs alone takes them all (one such scenario at a time).</summary>
    private static readonly SemaphoreSlim Lanes = new(LanesAtOnce, LanesAtOnce);
    private static readonly SemaphoreSlim Alone = new(1, 1);

    /// <summary>
    /// How long one quick scenario may take, its clusters' start included: the quick scenarios take
    /// 20 s to 2 min on a quiet two-core machine, and up to about 4 min with the machine's other
    /// core taken (issue 46). A limit, not a check: every check a scenario makes is its own.
    /// </summary>
    private static readonly TimeSpan ScenarioLimit = TimeSpan.FromMinutes(10);

    /// <summary>How long a scenario may wait for its turn: behind the rest of its assembly, when one lane runs at a time.</summary>
    private static readonly TimeSpan TurnLimit = TimeSpan.FromMinutes(35);

    protected async Task RunAsync(string name)
    {
        var scenario = ScenarioCatalogue.Get(name);
        using var turn = new CancellationTokenSource(TurnLimit);
        var alone = RunAlone.Contains(name) || scenario.TimedSecondBySecond;
        if (alone)
        {
            await Alone.WaitAsync(turn.Token);
        }

        var permits = alone ? LanesAtOnce : 1;
        for (var i = 0; i < permits; i++)
        {
            await Lanes.WaitAsync(turn.Token);
        }

        ScenarioReport report;
        try
        {
            using var timeout = new CancellationTokenSource(ScenarioLimit);
            try
            {
                report = await ScenarioRunner.RunAsync(scenario, environments.Environments, quick: true, timeout.Token);
            }
            catch (OperationCanceledException) when (timeout.IsCancellationRequested)
            {
                throw new TimeoutException($"The quick scenario {name} did not finish within {ScenarioLimit.TotalMinutes:0} minutes; its clusters' logs are under {environments.Environments.Artifacts}.");
            }
        }
        finally
        {
            Lanes.Release(permits);
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

/// <summary>
/// The scenarios timed second by second, alone (trait <c>Lane=timed</c>: eng/test.sh runs them
/// before any other test starts, and filters them out of the rest).
/// </summary>
[Collection(TimedLane.Name)]
[Trait("Lane", "timed")]
[TestCaseOrderer(CatalogueOrder.TypeName, CatalogueOrder.Assembly)]
public sealed class TimedScenarioTests(TimedLane lane, ITestOutputHelper output) : QuickScenarioTests(lane, output)
{
    public static TheoryData<string> Names() => Timed();

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

public sealed class TimedLane() : ScenarioEnvironments("timed")
{
    public const string Name = "fault scenarios: timed second by second";
}

[CollectionDefinition(TimedLane.Name)]
public sealed class TimedLaneCollection : ICollectionFixture<TimedLane>;

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
