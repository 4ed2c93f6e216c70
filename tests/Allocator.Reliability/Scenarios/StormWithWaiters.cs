using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// The load the instance-fault scenarios put on the cluster: brokers allocating, holding and
/// releasing in a roomy pool, and twice as many waiters as slots in a full one, so that callers
/// are parked in the grain's queue when its instance stops or dies.
/// </summary>
internal static class StormWithWaiters
{
    /// <param name="placement">Both pools' placement (issue 49): <c>spread</c>, the default, or <c>pack</c>.</param>
    public static async Task<(string Pool, string Tight, Brokers Brokers, Brokers Waiters)> SetUpAsync(ScenarioContext context, int quickBrokers, string placement = "spread")
    {
        var pool = context.Pool("p");
        var tight = context.Pool("t");
        // Spread is sent as no placement at all: the previous release (upgrade) knows no such member.
        var placed = placement == "spread" ? "" : $",\"placement\":\"{placement}\"";
        await context.SetUpPoolAsync(pool, $$"""{"maxWaitMs":0{{placed}}}""", workers: 10, capacity: 20);
        await context.SetUpPoolAsync(tight, $$"""{"maxWaitMs":3000{{placed}}}""", workers: 2, capacity: 3);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions
        {
            Clients = context.Pick(quickBrokers, 24),
            Pools = [pool],
            LeaselessShare = 0.3,
            RenewShare = 0.2,
        });
        var waiters = new Brokers(context.NewClient, context.Pool("w"), new BrokerOptions
        {
            Clients = 12,
            Pools = [tight],
            MaxWait = TimeSpan.FromSeconds(2),
            MaxHold = TimeSpan.FromMilliseconds(300),
            LeaselessShare = 0.3,
        });
        return (pool, tight, brokers, waiters);
    }
}
