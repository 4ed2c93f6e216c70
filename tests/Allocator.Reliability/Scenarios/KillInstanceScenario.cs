using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>SIGKILL of the instance hosting the pool's grain mid-storm, then its restart.</summary>
internal sealed class KillInstanceScenario : Scenario
{
    public override string Name => "kill-instance";

    public override string Proves =>
        "SIGKILL of the instance hosting the pool's grain mid-storm (and of another one in the full run), then a restart: every success committed, unknown outcomes resolved by retrying the same key, nothing stuck, loads exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions
        {
            Clients = context.Pick(12, 24),
            Pools = [pool],
            LeaselessShare = 0.3,
            RenewShare = 0.2,
        });

        var duration = context.Pick(TimeSpan.FromSeconds(16), TimeSpan.FromSeconds(45));
        using var stop = new CancellationTokenSource(duration);
        var storm = brokers.RunAsync(stop.Token);

        await context.Delay(duration * 0.25);
        await KillAndRestartAsync(context, pool, grainHost: true);
        if (!context.Quick)
        {
            await context.Delay(TimeSpan.FromSeconds(5));
            await KillAndRestartAsync(context, pool, grainHost: false);
        }

        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");

        // 200 slots, at most one unit per broker held at once: a "no capacity" is always false here.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }

    private static async Task KillAndRestartAsync(ScenarioContext context, string pool, bool grainHost)
    {
        using var probe = context.NewClient("probe", TimeSpan.FromSeconds(10));
        var silo = await probe.GrainSiloAsync(0, pool);
        var host = context.Cluster.InstanceOfSilo(silo) ?? 0;
        var victim = grainHost ? host : (host + 1) % context.Cluster.Urls.Count;
        context.Cluster.Kill(victim);
        context.Fault($"SIGKILL instance {victim}{(victim == host ? " (hosting the pool's grain)" : "")}");
        var clock = System.Diagnostics.Stopwatch.StartNew();
        await context.Delay(TimeSpan.FromSeconds(2));
        await context.Cluster.RestartAsync(victim, context.Cancellation);
        context.Fault($"instance {victim} restarted and ready {clock.Elapsed.TotalSeconds:0.0} s after the kill");
        var moved = await probe.GrainSiloAsync((victim + 1) % context.Cluster.Urls.Count, pool);
        context.Figure($"grain silo before / after kill at {context.Elapsed.TotalSeconds:0} s", $"{silo} / {moved}");
    }
}
