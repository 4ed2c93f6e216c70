using System.Collections.Concurrent;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>PostgreSQL stopped with <c>-m fast</c> or <c>-m immediate</c> mid-storm and started again (the scenarios' own server).</summary>
internal sealed class PostgresRestartScenario(string mode) : Scenario
{
    public override string Name => $"pg-restart-{mode}";

    public override string Proves =>
        $"PostgreSQL stopped with -m {mode}{(mode == "immediate" ? " (a crash: WAL recovery at start)" : "")} mid-storm, down for seconds, started again: successes survive the restart, calls during the outage answer 503 within the HTTP timeout, readiness turns unhealthy while the database is down and healthy again after, allocations resume.";

    public override ClusterKind Cluster => ClusterKind.PrivatePostgres;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var postgres = context.Postgres ?? throw new InvalidOperationException("This scenario needs the private PostgreSQL.");
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 8, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(10, 20), Pools = [pool], LeaselessShare = 0.5, RenewShare = 0.2, DrainTime = TimeSpan.FromSeconds(40) });

        // Brokers that never release (3 s leases): they keep calling allocate through the outage
        // while the others are busy retrying their releases.
        var allocators = new Brokers(context.NewClient, context.Pool("a"), new BrokerOptions { Clients = 4, Pools = [pool], Release = false, Lease = TimeSpan.FromSeconds(3), MinHold = TimeSpan.FromMilliseconds(300), MaxHold = TimeSpan.FromMilliseconds(500), DrainTime = TimeSpan.FromSeconds(40) });
        var downtime = context.Pick(TimeSpan.FromSeconds(4), TimeSpan.FromSeconds(8));
        var duration = context.Pick(TimeSpan.FromSeconds(14), TimeSpan.FromSeconds(45));

        // The storm ends after the recovery, whenever that comes (Outage.EndStormAfterRecoveryAsync).
        using var stop = new CancellationTokenSource();
        var plannedEnd = Outage.Now + duration;
        using var monitorStop = new CancellationTokenSource();
        var readiness = new ConcurrentQueue<ReadinessSample>();
        var monitor = Outage.MonitorReadinessAsync(context, readiness, monitorStop.Token);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), allocators.RunAsync(stop.Token));

        await context.Delay(duration * 0.25);
        var stoppedAt = Outage.Now;
        await postgres.StopAsync(mode, context.Cancellation);
        var down = Outage.Now;
        context.Fault($"pg_ctl stop -m {mode} (took {(down - stoppedAt).TotalSeconds:0.0} s)");
        await context.Delay(downtime);
        var starting = Outage.Now;
        await postgres.StartAgainAsync(context.Cancellation);
        var up = Outage.Now;
        context.Fault($"pg_ctl start after {(starting - down).TotalSeconds:0.0} s down (accepting connections {(up - starting).TotalSeconds:0.0} s later)");

        await Outage.EndStormAfterRecoveryAsync(context, readiness, up, plannedEnd, stop);
        await storm;
        await monitorStop.CancelAsync();
        await monitor;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions + allocators.Sessions:N0} ({brokers.Allocated + allocators.Allocated:N0} / {brokers.NoCapacity + allocators.NoCapacity:N0})");
        Outage.Judge(context, [.. readiness], down, starting, up, "stop", "start");
        // 160 slots; at most 20 units held by the releasing brokers, and 4 x 3 s / 0.3 s = 40 by
        // the others (one allocation per 300 ms at most, 3 s leases): a "no capacity" is false.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
