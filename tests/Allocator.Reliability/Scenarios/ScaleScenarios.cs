using Allocator.Reliability.Checking;
using Allocator.Reliability.Faults;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;
using Npgsql;
using NpgsqlTypes;

namespace Allocator.Reliability.Scenarios;

/// <summary>Many pools on a small connection pool.</summary>
internal sealed class ManyPoolsScenario : Scenario
{
    public override string Name => "many-pools";

    public override string Proves =>
        "Many pools (half of them strict, their rows held by a competing session past the lock timeout, so blocking statements keep their connections), each with its own grain and batches, on instances allowed 3 database connections each (one held by LISTEN): callers queue for connections and are answered within the HTTP timeout (503 when a wait outlives the command timeout), never a 500, a lost allocation or a hang.";

    public override ClusterKind Cluster => ClusterKind.SmallPool;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pools = Enumerable.Range(0, context.Pick(40, 80)).Select(i => context.Pool($"p{i}")).ToList();
        var strict = pools.Where((_, i) => i % 2 == 1).ToList();
        foreach (var pool in pools)
        {
            await context.SetUpPoolAsync(pool, strict.Contains(pool) ? """{"strategy":"strict"}""" : "{}", workers: 3, capacity: 10);
        }

        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(29, 48), Pools = pools, LeaselessShare = 0.3, RenewShare = 0.2, MaxHold = TimeSpan.FromMilliseconds(50) });
        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        context.Fault($"{pools.Count} pools (half strict), {context.Pick(29, 48)} brokers moving between them, Maximum Pool Size=3 per instance");
        var storm = brokers.RunAsync(stop.Token);

        // Blocking statements hold their connection while they wait for a row lock: a competing
        // session keeps every worker of a strict pool locked past the lock timeout, pool after pool.
        var held = 0;
        for (var i = 0; !stop.IsCancellationRequested; i++)
        {
            held += await DatabaseFaults.HoldLeastLoadedAsync(context.DirectConnectionString, context.Cluster.Schema, strict[i % strict.Count], 3, context.Cluster.Timeouts.Lock * 1.5, stop.Token);
        }

        context.Fault($"a competing session held every worker of one strict pool after another for {(context.Cluster.Timeouts.Lock * 1.5).TotalSeconds:0.0} s ({held} rows in all)");
        await storm;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");

        // 30 slots per pool; even if every broker chose one pool, at most one unit each: in the
        // quick run 29 < 30 always leaves room; the full run (48 brokers) makes no such promise.
        return new ScenarioResult(pools, new Expectations { NoCapacityImpossible = context.Quick ? _ => true : null });
    }
}

/// <summary>A registration storm while brokers allocate from the same pool.</summary>
internal sealed class RegistrationStormScenario : Scenario
{
    public override string Name => "registration-storm";

    public override string Proves =>
        "Thousands of workers registering (one by one through every instance, in batches of 100, and again to update) while brokers allocate from the same pool: every confirmed registration is in the database with its capacity, allocation goes on, loads exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("r");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = 8, Pools = [pool], LeaselessShare = 0.3 });
        using var stop = new CancellationTokenSource();
        var storm = brokers.RunAsync(stop.Token);

        var total = context.Pick(1_500, 10_000);
        var registrars = 16;
        var clock = System.Diagnostics.Stopwatch.StartNew();
        context.Fault($"{total:N0} workers registered by {registrars} concurrent clients (a tenth of them in batches of 100, a tenth registered twice)");
        await Task.WhenAll(Enumerable.Range(0, registrars).Select(r => Task.Run(async () =>
        {
            using var client = context.NewClient($"registrar-{r}", TimeSpan.FromSeconds(20));
            var random = new Random(r);
            var mine = Enumerable.Range(0, total).Where(i => i % registrars == r).ToList();
            var batched = mine.Take(mine.Count / 10 / 100 * 100).ToList();
            for (var b = 0; b < batched.Count; b += 100)
            {
                var batch = batched.Skip(b).Take(100).Select(i => ($"s{i}", 5)).ToList();
                await client.RegisterBatchAsync(random.Next(client.Instances), pool, batch);
            }

            foreach (var i in mine.Skip(batched.Count))
            {
                await client.RegisterAsync(random.Next(client.Instances), pool, $"s{i}", random.Next(1, 21));
                if (random.Next(10) == 0)
                {
                    await client.RegisterAsync(random.Next(client.Instances), pool, $"s{i}", random.Next(1, 21));
                }
            }
        })));

        var elapsed = clock.Elapsed;
        await stop.CancelAsync();
        await storm;
        context.Figure("registrations per second", total / elapsed.TotalSeconds, "0");
        context.Figure("sessions during the storm (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        await CheckRegistrationsAsync(context, pool);

        // The first 10 workers (200 slots) are there from the start; 8 brokers hold at most 8.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }

    /// <summary>Every worker whose last registration was confirmed is in the database with that capacity.</summary>
    private static async Task CheckRegistrationsAsync(ScenarioContext context, string pool)
    {
        var last = context.History.Operations
            .Where(o => o.Kind == OperationKind.Register && o.Pool == pool)
            .GroupBy(o => o.WorkerId!)
            .Select(g => g.MaxBy(o => o.InvokedAt)!)
            .Where(o => o.Outcome == Outcome.Ok)
            .ToList();
        await using var connection = new NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        await using var command = new NpgsqlCommand($"SELECT worker_id, capacity FROM {Faults.Sql.Quote(context.Cluster.Schema)}.workers WHERE pool_id = @pool", connection);
        command.Parameters.Add(new NpgsqlParameter("pool", NpgsqlDbType.Text) { Value = pool });
        var stored = new Dictionary<string, int>(StringComparer.Ordinal);
        await using (var reader = await command.ExecuteReaderAsync(context.Cancellation))
        {
            while (await reader.ReadAsync(context.Cancellation))
            {
                stored[reader.GetString(0)] = reader.GetInt32(1);
            }
        }

        var wrong = last.Where(o => !stored.TryGetValue(o.WorkerId!, out var capacity) || capacity != o.Capacity).ToList();
        context.Figure("confirmed registrations found in the database", $"{last.Count - wrong.Count:N0} of {last.Count:N0} (workers stored: {stored.Count:N0})");
        foreach (var op in wrong.Take(5))
        {
            context.ScenarioViolations.Add($"{op}: confirmed with capacity {op.Capacity}, stored {(stored.TryGetValue(op.WorkerId!, out var c) ? $"with capacity {c}" : "nowhere")}");
        }
    }
}
