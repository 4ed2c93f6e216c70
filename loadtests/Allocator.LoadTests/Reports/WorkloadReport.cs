using System.Globalization;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Workloads;
using Plots = Allocator.LoadTests.Reports.Charts;

namespace Allocator.LoadTests.Reports;

/// <summary>A table: a header and rows of cells, rendered as Markdown or HTML.</summary>
internal sealed record ReportTable(IReadOnlyList<string> Header, IReadOnlyList<string[]> Rows);

/// <summary>A chart: its file name beside the report, its title and its SVG.</summary>
internal sealed record ReportChart(string File, string Title, string Svg);

/// <summary>One strategy's run: its figures as lines and its invariant audit.</summary>
/// <param name="NotRun">Why the strategy produced no figures; null when it ran.</param>
internal sealed record ReportRun(string Strategy, string? NotRun, IReadOnlyList<string> Lines, ReportAudit? Audit);

/// <summary>An invariant audit in a report: its verdict, what it checked, the violations (at most 20).</summary>
internal sealed record ReportAudit(string Verdict, bool Passed, IReadOnlyList<string> Checked, IReadOnlyList<string> Violations);

/// <summary>
/// Everything a workload's report says, built once from the run's results; <see cref="MarkdownReport"/>
/// and <see cref="HtmlReport"/> render the same model, so the two cannot drift apart.
/// </summary>
internal sealed record WorkloadReport(
    string Title,
    string Question,
    IReadOnlyList<(string Name, string Value)> Facts,
    ReportTable Summary,
    string SummaryNote,
    ReportTable Comparison,
    ReportTable? Targets,
    ReportTable Errors,
    IReadOnlyList<ReportChart> Charts,
    IReadOnlyList<ReportRun> Runs)
{
    public static readonly string[] SummaryHeader =
    [
        "strategy", "RTT", "callers", "mean", "p50", "p95", "p99", "CV", "allocations/s", "errors", "10k allocations", "spread", "mean excess", "% of C/RTT", "audit",
    ];

    private const string Note = "Response times are per allocation step (allocate, or allocate + release), every one recorded; "
        + "percentiles are exact (nearest rank). CV = stdev / mean. Spread = max − min load over available workers at the end; "
        + "mean excess = chosen worker's score minus the lowest eligible score, in load-index points (0–10000; one slot of a "
        + "100-slot worker is 100). % of C/RTT = throughput / (callers / RTT), the limit with one round trip per allocation.";

    public static WorkloadReport Build(string workload, string question, RunEnvironment environment, IReadOnlyList<RunResult> results)
    {
        List<(string, string)> facts =
        [
            ("started", environment.StartedAt.ToString("yyyy-MM-dd HH:mm:ss", CultureInfo.InvariantCulture) + " UTC"),
            ("store", environment.Store),
            ("machine", RunEnvironment.Machine),
            ("command", environment.Command),
        ];
        if (environment.Note is { } note)
        {
            facts.Add(("note", note));
        }

        var targets = Workloads.Targets.For(workload, results);
        return new WorkloadReport(
            workload + (environment.Quick ? " (quick)" : ""),
            question,
            facts,
            new ReportTable(SummaryHeader, SummaryRows(results)),
            Note,
            ComparisonOf(results),
            targets.Count == 0 ? null : new ReportTable(["target", "measured", "verdict"], [.. targets.Select(t => new[] { t.Target, t.Measured, t.Verdict })]),
            new ReportTable(["strategy", "error", "count", "% of steps"],
                [.. results.Where(r => r.Failure is null).SelectMany(r => r.ErrorsByKind.OrderByDescending(e => e.Value).Select(e => new[]
                {
                    r.Scenario, e.Key, e.Value.ToString("N0", CultureInfo.InvariantCulture), (100.0 * e.Value / Math.Max(1, r.Steps)).ToString("0.###", CultureInfo.InvariantCulture) + "%",
                }))]),
            ChartsOf(workload, results),
            [.. results.Select(RunOf)]);
    }

    /// <summary>One row per strategy, shaped like the published broker table.</summary>
    public static IReadOnlyList<string[]> SummaryRows(IReadOnlyList<RunResult> results) =>
        [.. results.Select(r => r.Failure is not null
            ? [r.Scenario, Ms(r.Rtt.TotalMilliseconds, "0"), r.Callers.ToString(CultureInfo.InvariantCulture), "not run", "", "", "", "", "", "", "", "", "", "", r.Failure]
            : new[]
            {
                r.Scenario,
                r.Rtt > TimeSpan.Zero ? Ms(r.Rtt.TotalMilliseconds, "0") : "none",
                r.Callers.ToString("N0", CultureInfo.InvariantCulture),
                Ms(r.Latency.MeanMs),
                Ms(r.Latency.P50Ms),
                Ms(r.Latency.P95Ms),
                Ms(r.Latency.P99Ms),
                r.Latency.Cv.ToString("0.00", CultureInfo.InvariantCulture),
                r.Throughput.ToString("N1", CultureInfo.InvariantCulture),
                r.ErrorPercent.ToString("0.##", CultureInfo.InvariantCulture) + "%",
                r.TimeTo10k is { } t ? Duration(t.Time) + (t.Extrapolated ? " (extrapolated)" : "") : "n/a",
                r.Metric(MetricNames.LoadSpread) is { } spread ? spread.ToString("0", CultureInfo.InvariantCulture) + " slots" : "",
                r.Metric(MetricNames.MeanExcess) is { } excess ? excess.ToString("0.#", CultureInfo.InvariantCulture) : "",
                r.PercentOfRttLimit is { } limit ? limit.ToString("0.#", CultureInfo.InvariantCulture) + "%" : "",
                r.Audit is null ? "" : r.Audit.Passed ? "passed" : $"FAILED ({r.Audit.Violations.Count})",
            })];

    /// <summary>Each strategy against the best of the run: throughput as a share of the highest, p50 and p99 as multiples of the lowest.</summary>
    private static ReportTable ComparisonOf(IReadOnlyList<RunResult> results)
    {
        var ran = results.Where(r => r.Failure is null && r.Allocations > 0).ToList();
        var bestThroughput = ran.Select(r => r.Throughput).DefaultIfEmpty(0).Max();
        var bestP50 = ran.Select(r => r.Latency.P50Ms).DefaultIfEmpty(0).Min();
        var bestP99 = ran.Select(r => r.Latency.P99Ms).DefaultIfEmpty(0).Min();
        static string Times(double value, double best) => best <= 0 ? "" : (value / best).ToString("0.0#", CultureInfo.InvariantCulture) + "×";
        return new ReportTable(
            ["strategy", "allocations/s", "of the highest", "p50", "× lowest p50", "p99", "× lowest p99", "errors"],
            [.. ran.Select(r => new[]
            {
                r.Scenario,
                r.Throughput.ToString("N1", CultureInfo.InvariantCulture),
                bestThroughput <= 0 ? "" : (100 * r.Throughput / bestThroughput).ToString("0.#", CultureInfo.InvariantCulture) + "%",
                Ms(r.Latency.P50Ms),
                Times(r.Latency.P50Ms, bestP50),
                Ms(r.Latency.P99Ms),
                Times(r.Latency.P99Ms, bestP99),
                r.FailedSteps.ToString("N0", CultureInfo.InvariantCulture),
            })]);
    }

    private static List<ReportChart> ChartsOf(string workload, IReadOnlyList<RunResult> results)
    {
        var categories = results.Select(r => r.Scenario).ToList();
        double Value(RunResult r, Func<RunResult, double> f) => r.Failure is null ? f(r) : double.NaN;
        var ran = results.Where(r => r.Failure is null).ToList();
        List<DistributionLine> distributions = [.. ran.Select(r => new DistributionLine(r.Scenario, r.SortedLatenciesMs))];
        return
        [
            Chart("throughput.svg", $"{workload}: allocations per second", t => Plots.Bars(t, "allocations/s (higher is better)", categories, [new ChartSeries("allocations/s", [.. results.Select(r => Value(r, x => x.Throughput))])])),
            Chart("p99.svg", $"{workload}: response time p50 and p99", t => Plots.Bars(t, "ms (lower is better)", categories,
                [new ChartSeries("p50", [.. results.Select(r => Value(r, x => x.Latency.P50Ms))]), new ChartSeries("p99", [.. results.Select(r => Value(r, x => x.Latency.P99Ms))])], "N1", log: true)),
            Chart("latency-percentiles.svg", $"{workload}: response time by percentile, up to p99.9", t => Plots.Percentiles(t, distributions)),
            // The final second is partial: left out, as in the last-versus-first figure.
            Chart("throughput-over-time.svg", $"{workload}: allocations answered per second", t => Plots.OverTime(t, "allocations/s",
                [.. ran.Select(r => new TimeSeries(r.Scenario, [.. r.AllocationsPerSecond.SkipLast(1).Select(v => (double)v)]))])),
            Chart("latency-cdf.svg", $"{workload}: response-time distribution", t => Plots.Cdf(t, distributions)),
        ];

        static ReportChart Chart(string file, string title, Func<string, string> draw) => new(file, title, draw(title));
    }

    private static ReportRun RunOf(RunResult r)
    {
        if (r.Failure is not null)
        {
            return new ReportRun(r.Scenario, r.Failure, [], null);
        }

        List<string> lines =
        [
            $"load: {r.Model}; run: {r.Limits}",
            string.Create(CultureInfo.InvariantCulture, $"measured: {r.Steps:N0} steps, {r.Allocations:N0} allocations in {r.Elapsed.TotalSeconds:0.00} s"),
            string.Create(CultureInfo.InvariantCulture, $"response time ms: min {r.Latency.MinMs:0.###}, mean {r.Latency.MeanMs:0.###}, p50 {r.Latency.P50Ms:0.###}, p95 {r.Latency.P95Ms:0.###}, p99 {r.Latency.P99Ms:0.###}, max {r.Latency.MaxMs:0.###}, stdev {r.Latency.StdevMs:0.###}"),
        ];
        if (r.RttLimit is { } limit)
        {
            lines.Add(string.Create(CultureInfo.InvariantCulture, $"C/RTT limit: {limit:N0}/s; reached {r.PercentOfRttLimit:0.#}%"));
        }

        lines.Add("errors: " + (r.ErrorsByKind.Count == 0 ? "none" : string.Join(", ", r.ErrorsByKind.OrderByDescending(e => e.Value).Select(e => string.Create(CultureInfo.InvariantCulture, $"{e.Key} × {e.Value:N0}")))));
        lines.AddRange(r.Metrics.Select(m => string.Create(CultureInfo.InvariantCulture, $"{m.Name}: {m.Value:0.##} {m.Unit}")));
        return new ReportRun(
            r.Scenario,
            null,
            lines,
            r.Audit is { } audit ? new ReportAudit($"invariant audit ({audit.Source}): {(audit.Passed ? "passed" : "FAILED")}", audit.Passed, audit.Checked, [.. audit.Violations.Take(20).Select(v => v.ToString())]) : null);
    }

    private static string Ms(double ms, string? format = null) =>
        ms >= 10_000 ? (ms / 1000).ToString("0.0", CultureInfo.InvariantCulture) + " s"
        : ms.ToString(format ?? (ms < 1 ? "0.000" : ms < 10 ? "0.00" : "0.0"), CultureInfo.InvariantCulture) + " ms";

    private static string Duration(TimeSpan t) =>
        t.TotalHours >= 1 ? $"{(int)t.TotalHours}h{t.Minutes:00}m" : t.TotalMinutes >= 1 ? $"{(int)t.TotalMinutes}m{t.Seconds:00}s" : $"{t.TotalSeconds:0.0}s";
}
