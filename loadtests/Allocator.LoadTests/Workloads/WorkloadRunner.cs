using System.Globalization;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Workloads;

/// <summary>Runs every strategy of a workload side by side, one after the other, on one store.</summary>
/// <param name="duration">Overrides the workload's run length (<c>--minutes</c>, e.g. sustained for 30 minutes).</param>
/// <param name="display">How a running strategy's progress is shown (default: a line a second on <paramref name="progress"/>).</param>
internal sealed class WorkloadRunner(StoreProvider stores, TimeProvider time, TextWriter output, TextWriter progress, TimeSpan jitter = default, TimeSpan? duration = null, IProgressDisplay? display = null)
{
    public async Task<IReadOnlyList<RunResult>> RunAsync(WorkloadDefinition workload, bool quick, IReadOnlyCollection<string> strategyFilter, CancellationToken cancellationToken)
    {
        var size = duration is { } length ? workload.Size(quick) with { Duration = length } : workload.Size(quick);
        var runner = new ScenarioRunner(time, progress) { Display = display };
        var results = new List<RunResult>();
        foreach (var variant in workload.Strategies)
        {
            if (strategyFilter.Count > 0 && !strategyFilter.Any(f => variant.Label.Contains(f, StringComparison.OrdinalIgnoreCase)))
            {
                continue;
            }

            cancellationToken.ThrowIfCancellationRequested();
            var scenario = CreateScenario(workload, variant, size, quick);
            LoadModel model = size.Rate is { } rate ? new OpenModel(rate, size.Callers) : new ClosedModel(size.Callers);
            var duration = variant.MaxDuration is { } cap ? Min(size.Duration, quick ? cap.Quick : cap.Full) : size.Duration;
            var limits = new RunLimits(size.Allocations, duration, size.WarmUp);
            var context = new ScenarioContext(workload.Name, size.Callers, workload.Rtt, time, cancellationToken) { Jitter = jitter };
            output.WriteLine($"== {workload.Name} / {scenario.Name}: {(variant.Workers ?? size.Workers):N0} workers × {size.Capacity} slots, {model.Describe()}, RTT {workload.Rtt.TotalMilliseconds:0} ms, {limits.Describe()}");
            var result = await runner.RunAsync(scenario, context, model, limits);
            if (workload.Name == "sustained" && result.LastVersusFirstPercent(quick ? 5 : 60) is { } ratio)
            {
                result = result with { Metrics = [.. result.Metrics, new ScenarioMetric("last window vs first", ratio, $"% ({(quick ? 5 : 60)} s windows)")] };
                if (PerMinute(result.AllocationsPerSecond) is { Count: >= 2 } minutes)
                {
                    // The throughput series, and the worst minute against the first (issue 13: none below 75%).
                    output.WriteLine("  steps/s per minute: " + string.Join(", ", minutes.Select(m => m.ToString("0", CultureInfo.InvariantCulture))));
                    result = result with { Metrics = [.. result.Metrics, new ScenarioMetric("lowest minute vs first", 100 * minutes.Min() / minutes[0], "%")] };
                }
            }

            foreach (var metric in result.Metrics)
            {
                output.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {metric.Name}: {metric.Value:#,0.##} {metric.Unit}"));
            }

            result.Audit?.WriteTo(output);
            results.Add(result);
        }

        return results;
    }

    private static TimeSpan Min(TimeSpan a, TimeSpan b) => a < b ? a : b;

    /// <summary>Mean steps per second of each whole minute (the partial last minute left out).</summary>
    private static List<double> PerMinute(long[] perSecond) =>
        [.. Enumerable.Range(0, perSecond.Length / 60).Select(m => perSecond.Skip(m * 60).Take(60).Average())];

    /// <summary>Enough concurrent registrants to keep the storm's schedule when each registration costs a round trip or more.</summary>
    private static int Registrants(int workers, TimeSpan over, TimeSpan rtt)
    {
        var perSecond = workers / Math.Max(1, over.TotalSeconds);
        var perCall = Math.Max(rtt.TotalSeconds, 0.01);
        return Math.Max(8, (int)Math.Ceiling(perSecond * perCall * 2));
    }

    private IScenario CreateScenario(WorkloadDefinition workload, StrategyVariant variant, WorkloadSize size, bool quick)
    {
        var pool = new PoolShape(variant.Workers ?? size.Workers, size.Capacity, variant.Strategy, variant.Placement);
        if (variant.Baseline)
        {
            return new InteractiveTransactionBaseline(stores, pool, workload.MaxConnections);
        }

        if (workload.Registrations is { } registrations)
        {
            return new RegistrationStormScenario(
                variant.Label,
                stores,
                variant.Driver,
                pool,
                quick ? registrations.QuickWorkers : registrations.Workers,
                quick ? registrations.QuickOver : registrations.Over,
                Registrants(quick ? registrations.QuickWorkers : registrations.Workers, quick ? registrations.QuickOver : registrations.Over, workload.Rtt));
        }

        return new AllocationScenario(variant.Label, stores, variant.Driver, pool, workload.Step, workload.MaxConnections, variant.Multiplexing);
    }
}
