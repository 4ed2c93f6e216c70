using Allocator.Reliability.Checking;
using Allocator.Reliability.Faults;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>A competing session holds the least-loaded rows locked for seconds.</summary>
internal sealed class CompetingLocksScenario : Scenario
{
    public override string Name => "competing-locks";

    public override string Proves =>
        "A competing session repeatedly holds the pool's least-loaded rows FOR UPDATE for seconds (once all of them, longer than the lock timeout): skip-locked goes around them, the blocking fallback gives up within the lock timeout, and no caller is told \"no capacity\" while room exists.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 6, capacity: 30);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(10, 20), Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2 });
        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var storm = brokers.RunAsync(stop.Token);

        var hold = context.Pick(TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(4));
        var round = 0;
        while (!stop.IsCancellationRequested)
        {
            // Every third round takes every worker, for longer than the lock timeout.
            var all = round++ % 3 == 2;
            var held = await DatabaseFaults.HoldLeastLoadedAsync(context.DirectConnectionString, context.Cluster.Schema, pool, all ? 6 : 3,
                all ? context.Cluster.Timeouts.Lock * 2.5 : hold, stop.Token);
            context.Fault($"competing session held the {held} least-loaded rows FOR UPDATE for {(all ? context.Cluster.Timeouts.Lock * 2.5 : hold).TotalSeconds:0.0} s");
            try
            {
                await Task.Delay(300, stop.Token);
            }
            catch (OperationCanceledException)
            {
                break;
            }
        }

        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");

        // 180 slots for at most 20 units held: a "no capacity" is false, even with every row locked.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}

/// <summary>Strict strategy with concurrent batches of mixed units through every instance.</summary>
internal sealed class StrictMixedScenario : Scenario
{
    public override string Name => "strict-mixed";

    public override string Proves =>
        "The strict strategy (blocking FOR UPDATE on the true least-loaded row) under concurrent batches of mixed units (1-4) through every instance: no deadlock surfaces, no slot is taken twice, no false no-capacity.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, """{"strategy":"strict"}""", workers: 8, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions
        {
            Clients = 16,
            Pools = [pool],
            Units = r => r.Next(1, 5),
            MaxHold = TimeSpan.FromMilliseconds(100),
            LeaselessShare = 0.3,
            RenewShare = 0.2,
        });
        var duration = context.Pick(TimeSpan.FromSeconds(7), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        context.Fault("16 brokers asking for 1-4 units at once on a strict pool (the grain batches them)");
        await brokers.RunAsync(stop.Token);
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");

        // 8 workers x 20 slots; at most 16 x 4 = 64 units held: 160 - 64 = 96 >= 8 x 3 + 1, so
        // some worker always has room for 4 units.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }
}
