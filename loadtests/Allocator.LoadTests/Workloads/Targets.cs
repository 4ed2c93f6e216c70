using System.Globalization;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Workloads;

/// <summary>One target of issue 5 held against a run's figures. Measured and reported, never asserted.</summary>
internal sealed record TargetCheck(string Target, string Measured, bool? Met)
{
    public string Verdict => Met switch { true => "met", false => "MISSED", null => "not measured" };
}

/// <summary>The targets of issue 5, per workload, computed from the strategies run side by side.</summary>
internal static class Targets
{
    public static IReadOnlyList<TargetCheck> For(string workload, IReadOnlyList<RunResult> results)
    {
        RunResult? Find(string labelPart) => results.FirstOrDefault(r => r.Failure is null && r.Scenario.Contains(labelPart, StringComparison.OrdinalIgnoreCase));
        var batched = results.FirstOrDefault(r => r.Failure is null && r.Scenario.Contains("batched", StringComparison.Ordinal) && !r.Scenario.Contains("unbatched", StringComparison.Ordinal));
        var unbatched = Find("skip-locked unbatched");
        var baseline = Find("baseline");
        var checks = new List<TargetCheck>();
        switch (workload)
        {
            case "storm-90":
                foreach (var r in new[] { batched, unbatched }.OfType<RunResult>())
                {
                    checks.Add(AtLeast($"{r.Scenario}: allocations/s ≥ 480", r.Throughput, 480));
                    checks.Add(AtMost($"{r.Scenario}: p50 ≤ 100 ms", r.Latency.P50Ms, 100, " ms"));
                    checks.Add(AtMost($"{r.Scenario}: p99 ≤ 200 ms", r.Latency.P99Ms, 200, " ms"));
                    checks.Add(AtMost($"{r.Scenario}: errors = 0", r.FailedSteps, 0));
                    checks.Add(AtMost($"{r.Scenario}: load spread ≤ 1 slot", r.Metric(MetricNames.LoadSpread), 1, " slots"));
                }

                checks.Add(Ratio("skip-locked ≥ 20× the interactive-transaction baseline", (batched ?? unbatched)?.Throughput, baseline?.Throughput, 20));
                break;
            case "storm-250":
                foreach (var r in new[] { batched, unbatched }.OfType<RunResult>())
                {
                    checks.Add(AtLeast($"{r.Scenario}: allocations/s ≥ 173", r.Throughput, 173));
                    checks.Add(AtMost($"{r.Scenario}: 10,000 allocations ≤ 60 s", r.TimeTo10k?.Time.TotalSeconds, 60, r.TimeTo10k is { Extrapolated: true } ? " s (extrapolated)" : " s"));
                    checks.Add(AtMost($"{r.Scenario}: errors = 0", r.FailedSteps, 0));
                }

                break;
            case "wide-250":
                checks.Add(AtLeast("batched ≥ 3,000 allocations/s with ≤ 16 connections", batched?.Throughput, 3_000));
                checks.Add(Ratio("batched ≥ 45× unbatched", batched?.Throughput, unbatched?.Throughput, 45));
                break;
            case "loopback":
                checks.Add(AtLeast("batched ≥ 10,000 allocations/s", batched?.Throughput, 10_000));
                checks.Add(Ratio("batched ≥ 4× unbatched", batched?.Throughput, unbatched?.Throughput, 4));
                break;
            case "big-pool":
                foreach (var kind in new[] { "unbatched", "batched" })
                {
                    var small = results.FirstOrDefault(r => r.Failure is null && r.Scenario.Contains(kind + ", 100 workers", StringComparison.Ordinal));
                    var full = results.FirstOrDefault(r => r.Failure is null && r.Scenario.Contains(kind + ", full pool", StringComparison.Ordinal));
                    checks.Add(AtMost($"{kind}: p50 full pool ≤ 1.5× p50 with 100 workers", small is null || full is null || small.Latency.P50Ms == 0 ? null : full.Latency.P50Ms / small.Latency.P50Ms, 1.5, "×"));
                }

                break;
            case "sustained":
                foreach (var r in results.Where(r => r.Failure is null))
                {
                    checks.Add(AtLeast($"{r.Scenario}: last window ≥ 90% of the first", r.Metric("last window vs first"), 90, "%"));
                }

                break;
        }

        return checks;
    }

    private static TargetCheck AtLeast(string target, double? value, double bound, string unit = "") =>
        value is { } v ? new TargetCheck(target, Format(v) + unit, v >= bound) : new TargetCheck(target, "n/a", null);

    private static TargetCheck AtMost(string target, double? value, double bound, string unit = "") =>
        value is { } v ? new TargetCheck(target, Format(v) + unit, v <= bound) : new TargetCheck(target, "n/a", null);

    private static TargetCheck Ratio(string target, double? numerator, double? denominator, double bound) =>
        numerator is { } n && denominator is { } d && d > 0
            ? new TargetCheck(target, Format(n / d) + "×", n / d >= bound)
            : new TargetCheck(target, "n/a", null);

    private static string Format(double v) => v.ToString(v >= 100 ? "N0" : "0.##", CultureInfo.InvariantCulture);
}
