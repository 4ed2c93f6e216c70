using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// Brokers that give up while their allocation is in the store and retry with the same key at
/// once (issue 20, #1): the retry must hold whatever it is answered.
/// </summary>
internal sealed class GoneCallersScenario : Scenario
{
    public override string Name => "gone-callers";

    public override string Proves =>
        "Brokers abort their first allocation attempt after 12 ms (less than most round trips) while the round trip to PostgreSQL is 30 ms ± 30 ms, and retry at once with the same key, waiting for that answer: the pool grain sees callers give up with their batch in the store, then their retries. An allocation answered active to a broker ends only by that broker's release, its lease or its worker's deregistration (invariant 11), and no broker's release of what it holds is refused as not active.";

    public override ClusterKind Cluster => ClusterKind.Latency;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions
        {
            Clients = context.Pick(12, 24),
            Pools = [pool],
            ClientTimeout = TimeSpan.FromMilliseconds(12),
            RetryClientTimeout = TimeSpan.FromSeconds(20),
            RetryDelay = (0, 3),
            Lease = TimeSpan.FromSeconds(30),
            LeaselessShare = 0.3,
            MinHold = TimeSpan.FromMilliseconds(50),
            MaxHold = TimeSpan.FromMilliseconds(300),
            DrainTime = TimeSpan.FromSeconds(15),
        });

        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        context.Fault("every chunk between the instances and PostgreSQL delayed by 15 ms ± 15 ms each way (RTT 30 ms ± 30 ms), for the whole run");
        context.Fault("every broker aborts its first allocation attempt after 12 ms and retries at once (0-3 ms) with the same key, waiting up to 20 s for that answer");
        await brokers.RunAsync(stop.Token);
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");

        // 200 slots; at most 24 held by brokers at once, plus what abandoned calls hold until the
        // grain releases them (or their 30 s lease, for those a retry claimed and then gave up on).
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
