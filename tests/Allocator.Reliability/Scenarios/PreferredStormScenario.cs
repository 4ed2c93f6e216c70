using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;
using Npgsql;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// Issue 49, ADR 0036: brokers naming two pools on two databases in one call (each broker its own
/// order), callers waiting in both at once, beside one-pool callers of the same pools; the
/// instance hosting one pool's grain is killed mid-storm.
/// </summary>
internal sealed class PreferredStormScenario : Scenario
{
    public override string Name => "preferred-storm";

    public override string Proves =>
        "Preferred pools over two databases, one pool placed pack and one spread: brokers allocate with POST /v1/allocations naming both pools (half of them in each order), often waiting in both at once for a slot, beside one-pool brokers of the same pools, and the instance hosting a pool's grain is killed and restarted mid-storm: every success committed in the pool it names, no key holds an allocation in both pools (checked in both databases), nothing stuck, loads exact on each database.";

    public override ClusterKind Cluster => ClusterKind.TwoDatabases;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var second = context.SecondDirectConnectionString ?? throw new InvalidOperationException("This scenario needs database b.");
        var home = context.Pool("a");
        var away = context.Pool("b");

        // Few slots, so that both pools fill and callers wait in both; one placed pack, one spread.
        await context.SetUpPoolAsync(home, """{"database":"default","maxWaitMs":3000,"placement":"pack"}""", workers: 2, capacity: 2);
        await context.SetUpPoolAsync(away, """{"database":"b","maxWaitMs":3000}""", workers: 2, capacity: 2);
        var preferred = new Brokers(context.NewClient, context.Pool("pb"), new BrokerOptions
        {
            Clients = context.Pick(14, 24),
            Pools = [home, away],
            AnyOfPools = true,
            MaxWait = TimeSpan.FromSeconds(2),
            MinHold = TimeSpan.FromMilliseconds(100),
            MaxHold = TimeSpan.FromMilliseconds(400),
            LeaselessShare = 0.3,
            RenewShare = 0.2,
        });
        var plain = new Brokers(context.NewClient, context.Pool("ob"), new BrokerOptions
        {
            Clients = 4,
            Pools = [home, away],
            MaxWait = TimeSpan.FromSeconds(2),
            MaxHold = TimeSpan.FromMilliseconds(250),
            LeaselessShare = 0.3,
        });
        var duration = context.Pick(TimeSpan.FromSeconds(14), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var storm = Task.WhenAll(preferred.RunAsync(stop.Token), plain.RunAsync(stop.Token));

        await context.Delay(duration * 0.4);
        await KillInstanceScenario.KillAndRestartAsync(context, home, grainHost: true);
        await storm;

        var calls = context.History.Operations.Where(o => o is { Kind: OperationKind.Allocate, Pools: not null }).ToList();
        var answered = calls.Where(o => o.AnsweredPool is not null).ToList();
        context.Figure("preferred sessions (allocated / no capacity)", $"{preferred.Sessions:N0} ({preferred.Allocated:N0} / {preferred.NoCapacity:N0})");
        context.Figure("preferred calls answered by the first / the second pool named", $"{answered.Count(o => o.AnsweredPool == o.Pools![0]):N0} / {answered.Count(o => o.AnsweredPool == o.Pools![1]):N0}");
        var waited = answered.Where(o => o.Duration > TimeSpan.FromMilliseconds(200)).ToList();
        context.Figure("preferred calls served after waiting over 200 ms (by the first / the second pool named)", $"{waited.Count:N0} ({waited.Count(o => o.AnsweredPool == o.Pools![0]):N0} / {waited.Count(o => o.AnsweredPool == o.Pools![1]):N0})");
        context.Figure("one-pool sessions (allocated / no capacity)", $"{plain.Sessions:N0} ({plain.Allocated:N0} / {plain.NoCapacity:N0})");

        // One allocation per key across both pools: the per-database checker sees one pool each.
        var keys = new Dictionary<string, List<string>>(StringComparer.Ordinal);
        foreach (var (connection, pool) in new[] { (context.DirectConnectionString, home), (second, away) })
        {
            foreach (var key in await KeysAsync(connection, context.Cluster.Schema, pool, context.Cancellation))
            {
                (keys.TryGetValue(key, out var pools) ? pools : keys[key] = []).Add(pool);
            }
        }

        var twice = keys.Where(k => k.Value.Count > 1).ToList();
        context.Figure("keys with an allocation (in both pools)", $"{keys.Count:N0} ({twice.Count:N0})");
        foreach (var (key, pools) in twice.Take(10))
        {
            context.ScenarioViolations.Add($"key {key} holds allocations in {string.Join(" and ", pools)}: one preferred-pools call allocated twice");
        }

        return new ScenarioResult(
            [home, away],
            new Expectations(),
            [("a", context.DirectConnectionString, [home]), ("b", second, [away])]);
    }

    /// <summary>Every session key with an allocation in the pool, active or ended (the owner stripped).</summary>
    private static async Task<List<string>> KeysAsync(string connectionString, string schema, string pool, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var command = new NpgsqlCommand(
            $"SELECT session_key FROM {schema}.allocations WHERE pool_id = $1 UNION ALL SELECT session_key FROM {schema}.allocation_history WHERE pool_id = $1",
            connection);
        command.Parameters.Add(new NpgsqlParameter { Value = pool });
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        List<string> keys = [];
        while (await reader.ReadAsync(cancellationToken))
        {
            keys.Add(reader.GetString(0));
        }

        return keys;
    }
}
