using System.Globalization;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// A rolling restart (issue 21): each instance stopped with SIGTERM and started again in turn,
/// under a storm of raw HTTP brokers. A deploy must cost brokers nothing.
/// </summary>
internal sealed class RollingRestartScenario : Scenario
{
    public override string Name => "rolling-restart";

    public override string Proves =>
        "Each of the three instances stopped with SIGTERM and started again in turn (full run: twice over) under a storm of raw HTTP brokers that pick an instance at random, some waiting in a full pool's queue: no 5xx and no reset connection (a refused connection to the stopped instance sends the caller to another), every success committed, the pools' grains handed over with their waiters, nothing stuck.";

    /// <summary>
    /// Its promise is timed too: no broker sees a 5xx, and a call that runs past its own deadline
    /// (its wait plus the call timeout) is answered 503. Beside the host's tests on a saturated
    /// two-core machine (1.99 cores busy, restarted instances ready only 21-26 s after start), one
    /// allocation's batch sat in the store past that deadline (a clean-clone run, 2026-12-02, s12-p3).
    /// It runs in the timed lane, with nothing heavy beside it; any 5xx still fails it.
    /// </summary>
    public override bool TimedSecondBySecond => true;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var (pool, tight, brokers, waiters) = await StormWithWaiters.SetUpAsync(context, quickBrokers: 16);

        using var stop = new CancellationTokenSource();
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), waiters.RunAsync(stop.Token));
        await context.Delay(TimeSpan.FromSeconds(3));

        var rounds = context.Pick(1, 2);
        var stops = new List<double>();
        var ready = new List<double>();
        using var probe = context.NewClient("probe", TimeSpan.FromSeconds(10));
        for (var round = 0; round < rounds; round++)
        {
            for (var instance = 0; instance < context.Cluster.Urls.Count; instance++)
            {
                var other = (instance + 1) % context.Cluster.Urls.Count;
                var hosts = await HostsAsync(context, probe, other, pool, tight);
                var (took, exitCode) = await context.Cluster.StopAsync(instance, context.Cancellation);
                stops.Add(took.TotalSeconds);
                context.Fault(string.Create(CultureInfo.InvariantCulture, $"SIGTERM instance {instance}{hosts(instance)}: exited in {took.TotalSeconds:0.0} s with code {exitCode}"));
                if (exitCode != 0)
                {
                    context.ScenarioViolations.Add($"instance {instance} exited with code {exitCode} after SIGTERM, not 0");
                }

                var clock = System.Diagnostics.Stopwatch.StartNew();
                await context.Cluster.StartAsync(instance, context.Cancellation);
                ready.Add(clock.Elapsed.TotalSeconds);
                var now = (await HostsAsync(context, probe, other, pool, tight))(-1);
                context.Fault(string.Create(CultureInfo.InvariantCulture, $"instance {instance} started again, ready {clock.Elapsed.TotalSeconds:0.0} s later; grains now on instances {now}"));
                await context.Delay(TimeSpan.FromSeconds(2));
            }
        }

        await stop.CancelAsync();
        await storm;
        context.Figure("restarts", $"{stops.Count}: exit after SIGTERM {Range(stops)} s, ready again {Range(ready)} s after start");
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        context.Figure("waiting sessions (allocated / no capacity after the wait)", $"{waiters.Sessions:N0} ({waiters.Allocated:N0} / {waiters.NoCapacity:N0})");

        // The promise of a graceful stop: brokers see neither a 5xx nor a broken connection.
        var operations = context.History.Operations;
        var fiveHundreds = operations.Where(o => o.Status >= 500).ToList();
        var broken = operations.Where(o => o.Status == 0 && o.Problem != ApiClient.Refused && o.Outcome != Outcome.Pending).ToList();
        context.Figure("5xx during the restarts", fiveHundreds.Count, "0");
        context.Figure("connections reset or left without an answer", broken.Count, "0");
        if (fiveHundreds.Count > 0)
        {
            context.ScenarioViolations.Add($"{fiveHundreds.Count} answers with a 5xx during the rolling restart: {string.Join(", ", fiveHundreds.GroupBy(o => $"{o.Status} {o.Problem}").Select(g => $"{g.Key} x{g.Count()}"))}; first: {Describe(fiveHundreds[0])}");
        }

        if (broken.Count > 0)
        {
            context.ScenarioViolations.Add($"{broken.Count} calls whose connection was reset or that got no answer during the rolling restart; first: {Describe(broken[0])}");
        }

        return new ScenarioResult([pool, tight], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <summary>Which instances host the two pools' grains, as a suffix for the fault line.</summary>
    private static async Task<Func<int, string>> HostsAsync(ScenarioContext context, ApiClient probe, int through, string pool, string tight)
    {
        var hosts = new[] { pool, tight }.Select(async p => context.Cluster.InstanceOfSilo(await probe.GrainSiloAsync(through, p))).ToList();
        var of = await Task.WhenAll(hosts);
        return instance => instance < 0
            ? string.Join(" and ", of.Select(h => h?.ToString(CultureInfo.InvariantCulture) ?? "?"))
            : of.Contains(instance) ? $" (hosting the grain of {string.Join(" and ", new[] { "p", "t" }.Where((_, i) => of[i] == instance))})" : "";
    }

    private static string Range(List<double> values) =>
        values.Count == 0 ? "-" : string.Create(CultureInfo.InvariantCulture, $"{values.Min():0.0}–{values.Max():0.0}");

    private static string Describe(Operation op) =>
        string.Create(CultureInfo.InvariantCulture, $"{op.Kind} {op.Key ?? op.AllocationId?.ToString()} through instance {op.Instance} at {op.InvokedAt:HH:mm:ss.fff}: {op.Status} {op.Problem} {op.Detail}");
}
