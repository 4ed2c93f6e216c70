using System.Diagnostics;

namespace Allocator.LoadTests.Harness;

/// <summary>Exact response-time figures over every recorded step (no sampling, no averages of averages).</summary>
internal sealed record LatencyStatistics
{
    public required long Count { get; init; }
    public required double MeanMs { get; init; }
    public required double P50Ms { get; init; }
    public required double P95Ms { get; init; }
    public required double P99Ms { get; init; }
    public required double MaxMs { get; init; }
    public required double MinMs { get; init; }

    /// <summary>Population standard deviation.</summary>
    public required double StdevMs { get; init; }

    /// <summary>Coefficient of variation: stdev / mean (0 when there is nothing).</summary>
    public double Cv => MeanMs == 0 ? 0 : StdevMs / MeanMs;

    public static LatencyStatistics Empty { get; } = new() { Count = 0, MeanMs = 0, P50Ms = 0, P95Ms = 0, P99Ms = 0, MaxMs = 0, MinMs = 0, StdevMs = 0 };

    /// <summary>Figures from response times in milliseconds, sorted ascending.</summary>
    public static LatencyStatistics FromSorted(IReadOnlyList<double> sortedMs)
    {
        if (sortedMs.Count == 0)
        {
            return Empty;
        }

        // Two passes for a stable variance (no sum-of-squares cancellation).
        double sum = 0;
        foreach (var v in sortedMs)
        {
            sum += v;
        }

        var mean = sum / sortedMs.Count;
        double squares = 0;
        foreach (var v in sortedMs)
        {
            squares += (v - mean) * (v - mean);
        }

        return new LatencyStatistics
        {
            Count = sortedMs.Count,
            MeanMs = mean,
            P50Ms = Percentile(sortedMs, 0.50),
            P95Ms = Percentile(sortedMs, 0.95),
            P99Ms = Percentile(sortedMs, 0.99),
            MaxMs = sortedMs[^1],
            MinMs = sortedMs[0],
            StdevMs = Math.Sqrt(squares / sortedMs.Count),
        };
    }

    /// <summary>Nearest-rank percentile: the smallest value with at least <paramref name="q"/> of the values at or below it.</summary>
    public static double Percentile(IReadOnlyList<double> sorted, double q)
    {
        if (sorted.Count == 0)
        {
            return 0;
        }

        var rank = (int)Math.Ceiling(q * sorted.Count);
        return sorted[Math.Clamp(rank - 1, 0, sorted.Count - 1)];
    }

    /// <summary>Merges per-caller recordings (Stopwatch ticks) into one sorted array of milliseconds.</summary>
    public static double[] MergeToSortedMs(IEnumerable<List<long>> perCaller)
    {
        var lists = perCaller.ToList();
        var all = new double[lists.Sum(l => l.Count)];
        var i = 0;
        foreach (var list in lists)
        {
            foreach (var ticks in list)
            {
                all[i++] = ticks * 1000.0 / Stopwatch.Frequency;
            }
        }

        Array.Sort(all);
        return all;
    }
}
