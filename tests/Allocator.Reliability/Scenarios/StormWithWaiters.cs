using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// The load the instance-fault scenarios put on the cluster: brokers allocating, holding and
/// releasing in a roomy pool, and twice as many waiters as slots in a full one, so that callers
/// are parked in the grain's queue when its instance stops or dies.
/// </summary>
internal static class StormWithWaiters
{
    public static async Task<(string Pool, string Tight, Brokers Brokers, Brokers Waiters)> SetUpAsync(ScenarioContext context, int quickBrokers)
    {
        var pool = context.Pool("p");
        var tight = context.Pool("t");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        await context.SetUpPoolAsync(tight, """{"maxWaitMs":3000}""", workers: 2, capacity: 3);
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
