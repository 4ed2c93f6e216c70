using Allocator.Reliability.Checking;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>Latency with jitter between the service and PostgreSQL, and clients whose timeouts are shorter than the round trip.</summary>
internal sealed class LatencyScenario : Scenario
{
    public override string Name => "latency-jitter";

    public override string Proves =>
        "A 30 ms round trip with jitter (each way 15 ms ± 15 ms) injected between the instances and PostgreSQL by the load tests' proxy, with half the brokers giving up after 60 ms, less than a statement's round trip: calls abandoned mid-flight never leave an allocation nobody holds, retries with the same key never allocate twice.";

    public override ClusterKind Cluster => ClusterKind.Latency;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var patient = new Brokers(context.NewClient, context.Pool("pb"), new BrokerOptions { Clients = context.Pick(6, 16), Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.3 });
        var impatient = new Brokers(context.NewClient, context.Pool("ib"), new BrokerOptions
        {
            Clients = context.Pick(6, 16),
            Pools = [pool],
            ClientTimeout = TimeSpan.FromMilliseconds(60),
            LeaselessShare = 0.3,
            RenewShare = 0.3,
            DrainTime = TimeSpan.FromSeconds(15),
        });

        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        context.Fault("every chunk between the instances and PostgreSQL delayed by 15 ms ± 15 ms each way (RTT 30 ms ± 30 ms), for the whole run");
        context.Fault("half the brokers time out after 60 ms and retry with the same key");
        await Task.WhenAll(patient.RunAsync(stop.Token), impatient.RunAsync(stop.Token));
        context.Figure("sessions patient (allocated / no capacity)", $"{patient.Sessions:N0} ({patient.Allocated:N0} / {patient.NoCapacity:N0})");
        context.Figure("sessions impatient (allocated / no capacity)", $"{impatient.Sessions:N0} ({impatient.Allocated:N0} / {impatient.NoCapacity:N0})");

        // Abandoned calls can hold a slot until the grain releases it, which the 200 slots absorb
        // many times over (at most 32 units held by brokers at once).
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
