using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>Two brokers of different tenants on the same pools, with the same session keys (issue 22).</summary>
internal sealed class TwoTenantsScenario : Scenario
{
    public override string Name => "two-tenants";

    public override string Proves =>
        "Brokers of two tenants (two API keys) allocate, renew and release on the same pools with the very same session keys, while tenant B also reads, renews and releases tenant A's allocation ids with A's epochs: no broker is ever answered another tenant's allocation, every call on another tenant's allocation is answered 404 and changes nothing (invariant 12), and the invariants hold for both.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        string[] pools = [context.Pool("p1"), context.Pool("p2")];
        foreach (var pool in pools)
        {
            await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        }

        // The same prefix for both: every session key of tenant A is also one of tenant B.
        var prefix = context.Pool("k");
        var options = new BrokerOptions { Clients = context.Pick(6, 12), Pools = pools, RenewShare = 0.3, LeaselessShare = 0.2, MaxHold = TimeSpan.FromMilliseconds(300) };
        var a = new Brokers((name, timeout) => context.NewBrokerClient(0, "a-" + name, timeout), prefix, options);
        var b = new Brokers((name, timeout) => context.NewBrokerClient(1, "b-" + name, timeout), prefix, options);

        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        context.Fault("tenant B's brokers use exactly tenant A's session keys on the same pools");
        context.Fault("a prober with tenant B's key reads, renews and releases tenant A's allocation ids with A's epochs, every 20 ms");
        var probes = ProbeAsync(context, stop.Token);
        await Task.WhenAll(a.RunAsync(stop.Token), b.RunAsync(stop.Token));
        var (probed, leaked) = await probes;
        context.Figure("sessions tenant A (allocated)", $"{a.Sessions:N0} ({a.Allocated:N0})");
        context.Figure("sessions tenant B (allocated)", $"{b.Sessions:N0} ({b.Allocated:N0})");
        context.Figure("calls on the other tenant's allocations (not answered 404)", $"{probed:N0} ({leaked:N0})");
        return new ScenarioResult(pools, new Expectations { NoCapacityImpossible = _ => true });
    }

    /// <summary>Tenant B's calls on allocation ids tenant A was answered; every one must be a 404.</summary>
    private static async Task<(int Probed, int Leaked)> ProbeAsync(ScenarioContext context, CancellationToken stop)
    {
        using var prober = context.NewBrokerClient(1, "b-prober", TimeSpan.FromSeconds(20));
        var random = new Random(22);
        var (probed, leaked) = (0, 0);
        while (!stop.IsCancellationRequested)
        {
            await Task.Delay(20, CancellationToken.None);
            var theirs = context.History.Operations
                .Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok, Allocation: not null } && o.Tenant == Allocator.Reliability.Cluster.HostCluster.BrokerKeys[0].Tenant)
                .TakeLast(50).ToList();
            if (theirs.Count == 0)
            {
                continue;
            }

            var target = theirs[random.Next(theirs.Count)];
            var id = target.Allocation!.AllocationId;
            var instance = random.Next(prober.Instances);
            var op = random.Next(3) switch
            {
                0 => await prober.GetAllocationAsync(instance, target.Pool, id),
                1 => await prober.RenewAsync(instance, target.Pool, id, target.Allocation.Epoch, TimeSpan.FromSeconds(30), key: null),
                _ => await prober.ReleaseAsync(instance, target.Pool, id, target.Allocation.Epoch, key: null),
            };
            probed++;
            if (op.Status != 404)
            {
                leaked++;
                context.ScenarioViolations.Add($"{op}: tenant B's call on tenant A's allocation {id} was answered {op.Status}, not 404");
            }
        }

        return (probed, leaked);
    }
}
