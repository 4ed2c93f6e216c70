using Allocator.Reliability.Checking;
using Allocator.Reliability.Faults;
using Allocator.Reliability.Workload;
using Npgsql;

namespace Allocator.Reliability.Scenarios;

/// <summary><c>pg_terminate_backend</c> of the service's backends: all of them, those waiting on locks, the listener's.</summary>
internal sealed class TerminateBackendsScenario : Scenario
{
    public override string Name => "terminate-backends";

    public override string Proves =>
        "pg_terminate_backend of every backend of the cluster, then of those waiting for a lock (strict pool behind a competing lock), then of the LISTEN connection: statements cut mid-flight are reported as outcome unknown and resolved by the same key; the listener comes back.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        var strict = context.Pool("s");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        await context.SetUpPoolAsync(strict, """{"strategy":"strict"}""", workers: 4, capacity: 10);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(10, 20), Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2 });
        var strictBrokers = new Brokers(context.NewClient, context.Pool("sb"), new BrokerOptions { Clients = 4, Pools = [strict], Units = r => r.Next(1, 4), LeaselessShare = 0.3 });

        var duration = context.Pick(TimeSpan.FromSeconds(11), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), strictBrokers.RunAsync(stop.Token));
        var pattern = context.Cluster.ApplicationNamePattern;

        await context.Delay(duration * 0.2);
        var all = await DatabaseFaults.TerminateAsync(context.DirectConnectionString, pattern, "all", context.Cancellation);
        context.Fault($"pg_terminate_backend of all {all} backends of the cluster");

        // A competing session holds the strict pool's least-loaded rows longer than the lock
        // timeout, so strict statements queue on the lock; terminate those waiting.
        await context.Delay(duration * 0.2);
        var holder = DatabaseFaults.HoldLeastLoadedAsync(context.DirectConnectionString, context.Cluster.Schema, strict, 4, TimeSpan.FromSeconds(3), context.Cancellation);
        long waiters = 0;
        for (var attempt = 0; attempt < 25 && waiters == 0; attempt++)
        {
            await context.Delay(TimeSpan.FromMilliseconds(100));
            waiters = await DatabaseFaults.TerminateAsync(context.DirectConnectionString, pattern, "lock-waiters", context.Cancellation);
        }

        context.Fault($"pg_terminate_backend of {waiters} backends waiting for a lock (rows held by a competing session: {await holder})");

        await context.Delay(duration * 0.2);
        var listener = await DatabaseFaults.TerminateAsync(context.DirectConnectionString, pattern, "listener", context.Cancellation);
        context.Fault($"pg_terminate_backend of {listener} LISTEN connections");
        var back = await WaitForListenersAsync(context, pattern, TimeSpan.FromSeconds(15));
        context.Figure("LISTEN connections back after", back is { } b ? $"{b.TotalSeconds:0.0} s" : "not within 15 s");
        if (listener > 0 && back is null)
        {
            context.ScenarioViolations.Add("the change feed's LISTEN connection did not come back within 15 s after it was terminated");
        }

        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions + strictBrokers.Sessions:N0} ({brokers.Allocated + strictBrokers.Allocated:N0} / {brokers.NoCapacity + strictBrokers.NoCapacity:N0})");

        // Skip-locked pool: 200 slots for at most 20 units held. Strict pool: 40 slots on 4
        // workers for at most 4 x 3 units held, so some worker always has room for 3.
        return new ScenarioResult([pool, strict], new Expectations { NoCapacityImpossible = _ => true });
    }

    private static readonly string ListenersSql = Sql.Load("listeners.sql");

    /// <summary>Waits until every instance has its LISTEN connection again (one per instance).</summary>
    private static async Task<TimeSpan?> WaitForListenersAsync(ScenarioContext context, string pattern, TimeSpan limit)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (clock.Elapsed < limit)
        {
            await using var connection = new NpgsqlConnection(context.DirectConnectionString);
            await connection.OpenAsync(context.Cancellation);
            await using var count = new NpgsqlCommand(ListenersSql, connection);
            count.Parameters.AddWithValue("pattern", pattern);
            if ((long)(await count.ExecuteScalarAsync(context.Cancellation))! >= context.Cluster.Urls.Count)
            {
                return clock.Elapsed;
            }

            await Task.Delay(200, context.Cancellation);
        }

        return null;
    }
}
