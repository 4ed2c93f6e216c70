using System.Text;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Reports;

/// <summary>After <c>all</c>: every workload's table in one file, and charts by strategy and RTT.</summary>
internal static class SummaryWriter
{
    public static string Write(string directory, RunEnvironment environment, IReadOnlyList<RunResult> results)
    {
        Directory.CreateDirectory(directory);
        var sb = new StringBuilder();
        sb.AppendLine("# All workloads").AppendLine();
        sb.AppendLine($"- machine: {RunEnvironment.Machine}");
        sb.AppendLine($"- store: {environment.Store}");
        sb.AppendLine($"- command: `{environment.Command}`").AppendLine();
        foreach (var group in results.GroupBy(r => r.Workload))
        {
            sb.AppendLine($"## {group.Key}").AppendLine();
            sb.Append(MarkdownReport.Table(WorkloadReport.SummaryHeader, WorkloadReport.SummaryRows([.. group]))).AppendLine();
        }

        // Strategies by RTT: the storms side by side (one series per workload with an RTT).
        var withRtt = results.Where(r => r.Rtt > TimeSpan.Zero && r.Workload.StartsWith("storm", StringComparison.Ordinal)).ToList();
        if (withRtt.Count > 0)
        {
            var strategies = withRtt.Select(r => r.Scenario).Distinct().ToList();
            var workloads = withRtt.Select(r => r.Workload).Distinct().ToList();
            List<ChartSeries> Series(Func<RunResult, double> value) =>
                [.. workloads.Select(w => new ChartSeries(
                    $"{w} (RTT {withRtt.First(r => r.Workload == w).Rtt.TotalMilliseconds:0} ms)",
                    [.. strategies.Select(s => withRtt.FirstOrDefault(r => r.Workload == w && r.Scenario == s) is { Failure: null } r ? value(r) : double.NaN)]))];
            File.WriteAllText(Path.Combine(directory, "storms-throughput.svg"), Charts.Bars("storms: allocations per second by strategy and RTT", "allocations/s", strategies, Series(r => r.Throughput)));
            File.WriteAllText(Path.Combine(directory, "storms-p99.svg"), Charts.Bars("storms: p99 response time by strategy and RTT", "ms", strategies, Series(r => r.Latency.P99Ms), "N1", log: true));
            sb.AppendLine("![storms-throughput.svg](storms-throughput.svg)").AppendLine();
            sb.AppendLine("![storms-p99.svg](storms-p99.svg)").AppendLine();
        }

        var path = Path.Combine(directory, "summary.md");
        File.WriteAllText(path, sb.ToString());
        return path;
    }
}
