using System.Collections.Concurrent;
using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>The path to PostgreSQL silently drops everything for seconds (no reset, no close), then heals.</summary>
internal sealed class PartitionScenario : Scenario
{
    public override string Name => "db-partition";

    public override string Proves =>
        "The network path to PostgreSQL black-holes every packet for seconds (connections stay open, nothing arrives: half-open connections), then heals: no call hangs past the HTTP timeout, statements cut off are outcome-unknown and resolved by the same key, readiness turns unhealthy and back, the LISTEN connection recovers (full run: past its keepalive), allocations resume.";

    public override ClusterKind Cluster => ClusterKind.Partition;

    public override bool TimedSecondBySecond => true;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var proxy = context.Partition ?? throw new InvalidOperationException("This scenario needs the partition proxy.");
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 8, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = 10, Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2, DrainTime = TimeSpan.FromSeconds(40) });
        var allocators = new Brokers(context.NewClient, context.Pool("a"), new BrokerOptions { Clients = 4, Pools = [pool], Release = false, Lease = TimeSpan.FromSeconds(3), MinHold = TimeSpan.FromMilliseconds(300), MaxHold = TimeSpan.FromMilliseconds(500), DrainTime = TimeSpan.FromSeconds(40) });
        var partition = context.Pick(TimeSpan.FromSeconds(6), TimeSpan.FromSeconds(15));
        var duration = context.Pick(TimeSpan.FromSeconds(15), TimeSpan.FromSeconds(45));

        // The storm ends after the recovery, whenever that comes (Outage.EndStormAfterRecoveryAsync).
        using var stop = new CancellationTokenSource();
        var plannedEnd = Outage.Now + duration;
        using var monitorStop = new CancellationTokenSource();
        var readiness = new ConcurrentQueue<ReadinessSample>();
        var monitor = Outage.MonitorReadinessAsync(context, readiness, monitorStop.Token);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), allocators.RunAsync(stop.Token));

        await context.Delay(duration * 0.2);
        proxy.Partition();
        var down = Outage.Now;
        context.Fault("network partition: nothing passes between the instances and PostgreSQL, no connection is closed");
        await context.Delay(partition);
        proxy.Heal();
        var up = Outage.Now;
        context.Fault($"partition healed after {(up - down).TotalSeconds:0.0} s");

        await Outage.EndStormAfterRecoveryAsync(context, readiness, up, plannedEnd, stop);
        await storm;
        await monitorStop.CancelAsync();
        await monitor;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions + allocators.Sessions:N0} ({brokers.Allocated + allocators.Allocated:N0} / {brokers.NoCapacity + allocators.NoCapacity:N0})");

        // Probes are stamped when sent; the health check gives the store a command timeout, so a
        // probe sent less than that before the heal may still pass (its read goes through after it).
        Outage.Judge(context, [.. readiness], down, up, up, "partition", "heal");

        // 160 slots; at most 10 units held by the releasing brokers and 4 x 3 s / 0.3 s = 40 by the others.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
