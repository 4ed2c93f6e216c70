using System.Globalization;
using System.Net;
using System.Runtime.InteropServices;
using System.Text;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Reports;

/// <summary>Where and how a run was made, printed with every report.</summary>
internal sealed record RunEnvironment(string Command, string Store, DateTimeOffset StartedAt, bool Quick)
{
    public static string Machine =>
        $"{Environment.ProcessorCount} cores, {GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1024.0 * 1024 * 1024):0.#} GiB memory, "
        + $"{RuntimeInformation.OSDescription}, {RuntimeInformation.FrameworkDescription}";
}

/// <summary>Writes a workload's Markdown and HTML report and its SVG charts.</summary>
internal static class ReportWriter
{
    public static readonly string[] SummaryHeader =
    [
        "strategy", "RTT", "callers", "mean", "p50", "p95", "p99", "CV", "allocations/s", "errors", "10k allocations", "spread", "mean excess", "% of C/RTT", "audit",
    ];

    /// <summary>Writes <c>report.md</c>, <c>report.html</c> and the charts into <paramref name="directory"/>; returns the Markdown path.</summary>
    public static string Write(string directory, string workload, string question, RunEnvironment environment, IReadOnlyList<RunResult> results)
    {
        var targets = Workloads.Targets.For(workload, results);
        Directory.CreateDirectory(directory);
        var charts = Charts(workload, results);
        foreach (var (file, svg) in charts)
        {
            File.WriteAllText(Path.Combine(directory, file), svg);
        }

        var markdown = Markdown(workload, question, environment, results, charts.Select(c => c.File).ToList(), targets);
        var mdPath = Path.Combine(directory, "report.md");
        File.WriteAllText(mdPath, markdown);
        File.WriteAllText(Path.Combine(directory, "report.html"), Html(workload, question, environment, results, charts));
        return mdPath;
    }

    public static IReadOnlyList<(string File, string Svg)> Charts(string workload, IReadOnlyList<RunResult> results)
    {
        var categories = results.Select(r => r.Scenario).ToList();
        double Value(RunResult r, Func<RunResult, double> f) => r.Failure is null ? f(r) : double.NaN;
        var ran = results.Where(r => r.Failure is null).ToList();
        return
        [
            ("throughput.svg", SvgCharts.Bars($"{workload}: allocations per second", "allocations/s (higher is better)", categories, [new ChartSeries("allocations/s", [.. results.Select(r => Value(r, x => x.Throughput))])])),
            ("p99.svg", SvgCharts.Bars($"{workload}: response time p50 and p99", "ms (lower is better)", categories,
                [new ChartSeries("p50", [.. results.Select(r => Value(r, x => x.Latency.P50Ms))]), new ChartSeries("p99", [.. results.Select(r => Value(r, x => x.Latency.P99Ms))])], "N1", log: true)),
            ("latency-percentiles.svg", SvgCharts.Percentiles($"{workload}: response time by percentile, up to p99.9", [.. ran.Select(r => new DistributionLine(r.Scenario, r.SortedLatenciesMs))])),
            ("throughput-over-time.svg", SvgCharts.OverTime($"{workload}: allocations answered per second", "allocations/s",
                // The final second is partial: left out, as in the last-versus-first figure.
                [.. ran.Select(r => new TimeSeries(r.Scenario, [.. r.AllocationsPerSecond.SkipLast(1).Select(v => (double)v)]))])),
            ("latency-cdf.svg", SvgCharts.Cdf($"{workload}: response-time distribution", [.. ran.Select(r => new DistributionLine(r.Scenario, r.SortedLatenciesMs))])),
        ];
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

    public static string MarkdownTable(IReadOnlyList<string> header, IReadOnlyList<string[]> rows)
    {
        var sb = new StringBuilder();
        sb.Append("| ").Append(string.Join(" | ", header)).AppendLine(" |");
        sb.Append('|').Append(string.Concat(header.Select(_ => "---|"))).AppendLine();
        foreach (var row in rows)
        {
            sb.Append("| ").Append(string.Join(" | ", row.Select(c => c.Replace("|", "\\|", StringComparison.Ordinal)))).AppendLine(" |");
        }

        return sb.ToString();
    }

    private static string Markdown(string workload, string question, RunEnvironment environment, IReadOnlyList<RunResult> results, IReadOnlyList<string> charts, IReadOnlyList<Workloads.TargetCheck> targets)
    {
        var sb = new StringBuilder();
        sb.AppendLine(CultureInfo.InvariantCulture, $"# {workload}{(environment.Quick ? " (quick)" : "")}");
        sb.AppendLine();
        sb.AppendLine(CultureInfo.InvariantCulture, $"{question}.");
        sb.AppendLine();
        sb.AppendLine(CultureInfo.InvariantCulture, $"- started: {environment.StartedAt:yyyy-MM-dd HH:mm:ss} UTC");
        sb.AppendLine(CultureInfo.InvariantCulture, $"- store: {environment.Store}");
        sb.AppendLine(CultureInfo.InvariantCulture, $"- machine: {RunEnvironment.Machine}");
        sb.AppendLine(CultureInfo.InvariantCulture, $"- command: `{environment.Command}`");
        sb.AppendLine();
        sb.AppendLine("## Summary");
        sb.AppendLine();
        sb.Append(MarkdownTable(SummaryHeader, SummaryRows(results)));
        sb.AppendLine();
        sb.AppendLine("Response times are per allocation step (allocate, or allocate + release), every one recorded; "
            + "percentiles are exact (nearest rank). CV = stdev / mean. Spread = max − min load over available workers at the end; "
            + "mean excess = chosen worker's score minus the lowest eligible score, in load-index points (0–10000; one slot of a "
            + "100-slot worker is 100). % of C/RTT = throughput / (callers / RTT), the limit with one round trip per allocation.");
        sb.AppendLine();
        if (targets.Count > 0)
        {
            sb.AppendLine("## Targets (issue 5; measured, never asserted)");
            sb.AppendLine();
            sb.Append(MarkdownTable(["target", "measured", "verdict"], [.. targets.Select(t => new[] { t.Target, t.Measured, t.Verdict })]));
            sb.AppendLine();
        }

        foreach (var chart in charts)
        {
            sb.AppendLine(CultureInfo.InvariantCulture, $"![{chart}]({chart})");
            sb.AppendLine();
        }

        sb.AppendLine("## Runs");
        foreach (var r in results)
        {
            sb.AppendLine();
            sb.AppendLine(CultureInfo.InvariantCulture, $"### {r.Scenario}");
            sb.AppendLine();
            if (r.Failure is not null)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"Not run: {r.Failure}");
                continue;
            }

            sb.AppendLine(CultureInfo.InvariantCulture, $"- load: {r.Model}; run: {r.Limits}");
            sb.AppendLine(CultureInfo.InvariantCulture, $"- measured: {r.Steps:N0} steps, {r.Allocations:N0} allocations in {r.Elapsed.TotalSeconds:0.00} s");
            sb.AppendLine(CultureInfo.InvariantCulture, $"- response time ms: min {r.Latency.MinMs:0.###}, mean {r.Latency.MeanMs:0.###}, p50 {r.Latency.P50Ms:0.###}, p95 {r.Latency.P95Ms:0.###}, p99 {r.Latency.P99Ms:0.###}, max {r.Latency.MaxMs:0.###}, stdev {r.Latency.StdevMs:0.###}");
            if (r.RttLimit is { } limit)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"- C/RTT limit: {limit:N0}/s; reached {r.PercentOfRttLimit:0.#}%");
            }

            sb.AppendLine(CultureInfo.InvariantCulture, $"- errors: {(r.ErrorsByKind.Count == 0 ? "none" : string.Join(", ", r.ErrorsByKind.OrderByDescending(e => e.Value).Select(e => $"{e.Key} × {e.Value:N0}")))}");
            foreach (var metric in r.Metrics)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"- {metric.Name}: {metric.Value:0.##} {metric.Unit}");
            }

            if (r.Audit is { } audit)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"- invariant audit ({audit.Source}): {(audit.Passed ? "passed" : "FAILED")}");
                foreach (var line in audit.Checked)
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"  - {line}");
                }

                foreach (var violation in audit.Violations.Take(20))
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"  - **violation** {violation}");
                }
            }
        }

        return sb.ToString();
    }

    private static string Html(string workload, string question, RunEnvironment environment, IReadOnlyList<RunResult> results, IReadOnlyList<(string File, string Svg)> charts)
    {
        static string E(string s) => WebUtility.HtmlEncode(s);
        var sb = new StringBuilder();
        sb.AppendLine("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">");
        sb.AppendLine(CultureInfo.InvariantCulture, $"<title>{E(workload)} load test</title>");
        sb.AppendLine("<style>body{font-family:Helvetica,Arial,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:13px}"
            + "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}"
            + ".fail{color:#b00;font-weight:bold}svg{max-width:100%;height:auto;margin:1em 0}</style></head><body>");
        sb.AppendLine(CultureInfo.InvariantCulture, $"<h1>{E(workload)}{(environment.Quick ? " (quick)" : "")}</h1><p>{E(question)}.</p>");
        sb.AppendLine(CultureInfo.InvariantCulture, $"<ul><li>started: {environment.StartedAt:yyyy-MM-dd HH:mm:ss} UTC</li><li>store: {E(environment.Store)}</li><li>machine: {E(RunEnvironment.Machine)}</li><li>command: <code>{E(environment.Command)}</code></li></ul>");
        sb.AppendLine("<h2>Summary</h2><table><tr>");
        foreach (var h in SummaryHeader)
        {
            sb.Append(CultureInfo.InvariantCulture, $"<th>{E(h)}</th>");
        }

        sb.AppendLine("</tr>");
        foreach (var row in SummaryRows(results))
        {
            sb.Append("<tr>");
            foreach (var cell in row)
            {
                var css = cell.StartsWith("FAILED", StringComparison.Ordinal) ? " class=\"fail\"" : "";
                sb.Append(CultureInfo.InvariantCulture, $"<td{css}>{E(cell)}</td>");
            }

            sb.AppendLine("</tr>");
        }

        sb.AppendLine("</table>");
        foreach (var (_, svg) in charts)
        {
            sb.AppendLine(svg);
        }

        sb.AppendLine("<h2>Errors and audits</h2><ul>");
        foreach (var r in results)
        {
            var errors = r.Failure ?? (r.ErrorsByKind.Count == 0 ? "no errors" : string.Join(", ", r.ErrorsByKind.Select(e => $"{e.Key} × {e.Value:N0}")));
            var audit = r.Audit is null ? "" : r.Audit.Passed ? "; audit passed" : $"; audit FAILED: {string.Join("; ", r.Audit.Violations.Take(10))}";
            sb.AppendLine(CultureInfo.InvariantCulture, $"<li><b>{E(r.Scenario)}</b>: {E(errors)}{E(audit)}</li>");
        }

        sb.AppendLine("</ul></body></html>");
        return sb.ToString();
    }

    private static string Ms(double ms, string? format = null) =>
        ms >= 10_000 ? (ms / 1000).ToString("0.0", CultureInfo.InvariantCulture) + " s"
        : ms.ToString(format ?? (ms < 1 ? "0.000" : ms < 10 ? "0.00" : "0.0"), CultureInfo.InvariantCulture) + " ms";

    private static string Duration(TimeSpan t) =>
        t.TotalHours >= 1 ? $"{(int)t.TotalHours}h{t.Minutes:00}m" : t.TotalMinutes >= 1 ? $"{(int)t.TotalMinutes}m{t.Seconds:00}s" : $"{t.TotalSeconds:0.0}s";
}
