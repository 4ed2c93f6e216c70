namespace Allocator.LoadTests.Harness;

/// <summary>The figures of one scenario run (one strategy of one workload).</summary>
internal sealed record RunResult
{
    public const long TenThousand = 10_000;

    public required string Workload { get; init; }
    public required string Scenario { get; init; }
    public required string Model { get; init; }
    public required int Callers { get; init; }
    public required TimeSpan Rtt { get; init; }
    public required string Limits { get; init; }

    /// <summary>Measured steps (warm-up excluded), failed ones included.</summary>
    public required long Steps { get; init; }

    /// <summary>Measured successful allocations.</summary>
    public required long Allocations { get; init; }

    public required long FailedSteps { get; init; }
    public required IReadOnlyDictionary<string, long> ErrorsByKind { get; init; }

    /// <summary>Wall time of the measured phase (warm-up end to the last measured answer).</summary>
    public required TimeSpan Elapsed { get; init; }

    /// <summary>Response time of every measured step, successful or not.</summary>
    public required LatencyStatistics Latency { get; init; }

    /// <summary>Every measured response time in ms, ascending (for distribution charts).</summary>
    public required double[] SortedLatenciesMs { get; init; }

    /// <summary>When the 10,000th measured allocation answered, if the run got that far.</summary>
    public TimeSpan? TimeTo10kMeasured { get; init; }

    /// <summary>Allocations answered in each second of the measured phase (for decay over time).</summary>
    public long[] AllocationsPerSecond { get; init; } = [];

    public IReadOnlyList<ScenarioMetric> Metrics { get; init; } = [];

    public AuditResult? Audit { get; init; }

    /// <summary>Why the run produced no figures (e.g. a driver not wired yet); null when it ran.</summary>
    public string? Failure { get; init; }

    public double Throughput => Elapsed.TotalSeconds <= 0 ? 0 : Allocations / Elapsed.TotalSeconds;

    public double ErrorPercent => Steps == 0 ? 0 : 100.0 * FailedSteps / Steps;

    /// <summary>Time to 10,000 allocations: measured when reached, else extrapolated from the throughput.</summary>
    public (TimeSpan Time, bool Extrapolated)? TimeTo10k =>
        TimeTo10kMeasured is { } measured ? (measured, false)
        : Throughput > 0 ? (TimeSpan.FromSeconds(TenThousand / Throughput), true)
        : null;

    /// <summary>The C/RTT limit (one round trip per allocation), or null without an injected RTT.</summary>
    public double? RttLimit => Rtt > TimeSpan.Zero ? Callers / Rtt.TotalSeconds : null;

    public double? PercentOfRttLimit => RttLimit is { } limit ? 100.0 * Throughput / limit : null;

    /// <summary>Throughput of the last <paramref name="window"/> as a percentage of the first (null when the run is shorter than two windows).</summary>
    public double? LastVersusFirstPercent(int window)
    {
        var seconds = AllocationsPerSecond;
        if (window <= 0 || seconds.Length < 2 * window)
        {
            return null;
        }

        // The final second is partial; leave it out.
        var usable = seconds[..^1];
        if (usable.Length < 2 * window)
        {
            return null;
        }

        double first = usable[..window].Sum();
        double last = usable[^window..].Sum();
        return first == 0 ? null : 100 * last / first;
    }

    public double? Metric(string name) => Metrics.FirstOrDefault(m => m.Name == name)?.Value;

    public static RunResult Failed(string workload, string scenario, LoadModel model, TimeSpan rtt, RunLimits limits, string failure) => new()
    {
        Workload = workload,
        Scenario = scenario,
        Model = model.Describe(),
        Callers = model.Callers,
        Rtt = rtt,
        Limits = limits.Describe(),
        Steps = 0,
        Allocations = 0,
        FailedSteps = 0,
        ErrorsByKind = new Dictionary<string, long>(),
        Elapsed = TimeSpan.Zero,
        Latency = LatencyStatistics.Empty,
        SortedLatenciesMs = [],
        Failure = failure,
    };
}

/// <summary>Names of the metrics scenarios commonly report.</summary>
internal static class MetricNames
{
    /// <summary>Max − min load over available workers at the end of the run, in slots.</summary>
    public const string LoadSpread = "load spread";

    /// <summary>Mean over allocations of the chosen worker's score minus the lowest score, in load-index points (0–10000).</summary>
    public const string MeanExcess = "mean excess";
}
