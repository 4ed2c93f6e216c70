using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>SIGKILL of the instance hosting the pool's grain mid-storm, then its restart.</summary>
internal sealed class KillInstanceScenario : Scenario
{
    public override string Name => "kill-instance";

    public override string Proves =>
        "SIGKILL of the instance hosting a pool's grain mid-storm, then a restart, and again for a full pool whose callers wait in the grain's queue (full run: then a third instance): every success committed, unknown outcomes resolved by retrying the same key, parked callers of the dead grain leave nothing behind, nothing stuck, loads exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var (pool, tight, brokers, waiters) = await StormWithWaiters.SetUpAsync(context, quickBrokers: 12);

        var duration = context.Pick(TimeSpan.FromSeconds(22), TimeSpan.FromSeconds(50));
        using var stop = new CancellationTokenSource(duration);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), waiters.RunAsync(stop.Token));

        await context.Delay(duration * 0.2);
        await KillAndRestartAsync(context, pool, grainHost: true);
        await context.Delay(TimeSpan.FromSeconds(2));
        await KillAndRestartAsync(context, tight, grainHost: true);
        if (!context.Quick)
        {
            await context.Delay(TimeSpan.FromSeconds(5));
            await KillAndRestartAsync(context, pool, grainHost: false);
        }

        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        context.Figure("waiting sessions (allocated / no capacity after the wait)", $"{waiters.Sessions:N0} ({waiters.Allocated:N0} / {waiters.NoCapacity:N0})");

        // The roomy pool: 200 slots, at most one unit per broker held at once, so a "no capacity"
        // is always false there. The tight pool runs out on purpose.
        return new ScenarioResult([pool, tight], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <summary>SIGKILL of the instance hosting the grain of <paramref name="pool"/> (or of another instance), then its restart.</summary>
    internal static async Task KillAndRestartAsync(ScenarioContext context, string pool, bool grainHost)
    {
        using var probe = context.NewClient("probe", TimeSpan.FromSeconds(10));
        var silo = await probe.GrainSiloAsync(0, pool);
        var host = context.Cluster.InstanceOfSilo(silo) ?? 0;
        var victim = grainHost ? host : (host + 1) % context.Cluster.Urls.Count;
        context.Cluster.Kill(victim);
        context.Fault($"SIGKILL instance {victim}{(victim == host ? $" (hosting the grain of {pool})" : "")}");
        var clock = System.Diagnostics.Stopwatch.StartNew();
        await context.Delay(TimeSpan.FromSeconds(2));
        await context.Cluster.RestartAsync(victim, context.Cancellation);
        context.Fault($"instance {victim} restarted and ready {clock.Elapsed.TotalSeconds:0.0} s after the kill");
        var moved = await probe.GrainSiloAsync((victim + 1) % context.Cluster.Urls.Count, pool);
        context.Figure($"grain silo before / after kill at {context.Elapsed.TotalSeconds:0} s", $"{silo} / {moved}");
    }
}
