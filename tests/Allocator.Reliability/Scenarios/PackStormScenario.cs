using Allocator.Reliability.Checking;

namespace Allocator.Reliability.Scenarios;

/// <summary>The instance-fault storm on pools placed with pack, the placement switched at run time (issue 49).</summary>
internal sealed class PackStormScenario : Scenario
{
    public override string Name => "pack-storm";

    public override string Proves =>
        "The kill-instance storm on pools placed with pack (the most-loaded worker that fits first; batches fill one worker, then the next): brokers allocate, renew and release in a roomy pool whose placement is switched between pack and spread every 2 s at run time, waiters queue for a full pool, and the instance hosting the roomy pool's grain is killed and restarted mid-storm: every success committed, no key allocated twice, nothing stuck, loads exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var (pool, tight, brokers, waiters) = await StormWithWaiters.SetUpAsync(context, quickBrokers: 12, placement: "pack");
        var duration = context.Pick(TimeSpan.FromSeconds(16), TimeSpan.FromSeconds(45));
        using var stop = new CancellationTokenSource(duration);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), waiters.RunAsync(stop.Token));
        var switches = SwitchPlacementAsync(context, pool, stop.Token);

        await context.Delay(duration * 0.3);

        // The full pool's demand while its waiters queue (issue 49): what an autoscaler would read.
        using (var probe = context.NewClient("demand", TimeSpan.FromSeconds(10)))
        {
            context.Figure("demand of the full pool mid-storm (GET /v1/pools/{pool})", await probe.DemandAsync(0, tight) ?? "none");
        }

        await context.Delay(duration * 0.1);
        await KillInstanceScenario.KillAndRestartAsync(context, pool, grainHost: true);

        await storm;
        context.Figure("placement switches of the roomy pool (answered 200)", $"{await switches:N0}");
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        context.Figure("waiting sessions (allocated / no capacity after the wait)", $"{waiters.Sessions:N0} ({waiters.Allocated:N0} / {waiters.NoCapacity:N0})");

        // As in kill-instance: 200 slots for at most one unit per broker, whichever the placement.
        return new ScenarioResult([pool, tight], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <summary>Spread, pack, spread, ... every 2 s through a random instance, until <paramref name="stop"/>.</summary>
    private static async Task<int> SwitchPlacementAsync(ScenarioContext context, string pool, CancellationToken stop)
    {
        using var admin = context.NewClient("placement", TimeSpan.FromSeconds(10));
        var random = new Random(17);
        var switched = 0;
        for (var pack = false; !stop.IsCancellationRequested; pack = !pack)
        {
            try
            {
                await Task.Delay(TimeSpan.FromSeconds(2), stop);
            }
            catch (OperationCanceledException)
            {
                break;
            }

            var op = await admin.PutPoolAsync(random.Next(admin.Instances), pool, pack ? """{"placement":"pack"}""" : """{"placement":"spread"}""");
            switched += op.Status == 200 ? 1 : 0;
        }

        return switched;
    }
}
