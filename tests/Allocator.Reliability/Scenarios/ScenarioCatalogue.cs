using System.Globalization;
using System.Text;

namespace Allocator.Reliability.Scenarios;

/// <summary>Every scenario, in the order eng/faults.sh runs them (grouped by the cluster they need).</summary>
internal static class ScenarioCatalogue
{
    public static IReadOnlyList<Scenario> All { get; } =
    [
        new KillInstanceScenario(),
        new RollingRestartScenario(),
        new FailoverScenario(),
        new FailoverScenario(paused: true),
        new BusyCoresScenario(),
        new TerminateBackendsScenario(),
        new CompetingLocksScenario(),
        new StrictMixedScenario(),
        new ReplayScenario(),
        new ChurnScenario(),
        new ShortLeasesScenario(),
        new RegistrationStormScenario(),
        new LatencyScenario(),
        new GoneCallersScenario(),
        new TwoTenantsScenario(),
        new PackStormScenario(),
        new FailoverScenario(paused: true, pair: true),
        new BusyCoresScenario(pair: true),

        // The lane of clusters with servers of their own (QuickScenarioTests) starts with the
        // scenarios whose checks are timed second by second (a's pools while b is out, readiness
        // in a partition): in CI they then run before the store's and the release's tests, the
        // run's heaviest neighbours, have started.
        new DatabaseDownScenario(),
        new DatabaseDownScenario(frozen: true),
        new PartitionScenario(),
        new PreferredStormScenario(),
        new ManyPoolsScenario(),
        new PostgresRestartScenario("fast"),
        new PostgresRestartScenario("immediate"),
        new UpgradeScenario(),

        // Last in its lane: in CI it runs beside the standard lane's short scenarios, after the
        // upgrade (which runs alone) has let the other lane go on.
        new FailoverScenario(cutOff: true),
        new FailoverScenario(cutOff: true, pair: true),
        new PostgresFailoverScenario(),
        new PostgresFailoverScenario(asynchronous: true),
    ];

    public static Scenario Get(string name) => All.Single(s => s.Name == name);

    /// <summary>A table of the run: one line per scenario.</summary>
    public static string Summary(IReadOnlyList<ScenarioReport> reports)
    {
        var text = new StringBuilder();
        text.AppendLine("| scenario | time | operations | allocations checked | faults | 5xx | violations |");
        text.AppendLine("|---|---|---|---|---|---|---|");
        foreach (var r in reports)
        {
            text.AppendLine(CultureInfo.InvariantCulture,
                $"| {r.Name} | {r.Duration.TotalSeconds:0} s | {r.Figures.GetValueOrDefault("operations", "")} | {r.Check.Allocations:N0} | {r.Faults.Count} | {r.Figures.GetValueOrDefault("5xx answers", "")} | {r.Violations} |");
        }

        return text.ToString();
    }
}
