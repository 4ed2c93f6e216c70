using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>Deregister/register, drain/undrain and capacity shrink at a high rate, with stale reports, while brokers allocate.</summary>
internal sealed class ChurnScenario : Scenario
{
    public override string Name => "worker-churn";

    public override string Proves =>
        "Half the workers are deregistered and registered again, drained and undrained, shrunk below their load and reported with stale epochs many times a second while brokers allocate: no allocation lands on a worker confirmed drained or deregistered, stale reports change nothing, loads stay exact.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("c");
        await context.SetUpPoolAsync(pool, "{}", workers: 12, capacity: 10);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = 12, Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2 });
        var duration = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(40));
        using var stop = new CancellationTokenSource(duration);
        var storm = brokers.RunAsync(stop.Token);
        var counts = new long[6];
        context.Fault("workers w6-w11: deregister/register, drain/undrain, capacity shrink, reports with current and stale epochs, back to back from 6 agents");
        await Task.WhenAll(Enumerable.Range(6, 6).Select(w => Task.Run(() => AgentAsync(context, pool, $"w{w}", counts, stop.Token))));
        await storm;
        context.Figure("churn (deregistrations / drains / shrinks / stale reports / reports / re-registrations)", string.Join(" / ", counts.Select(c => c.ToString("N0", System.Globalization.CultureInfo.InvariantCulture))));
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions:N0} ({brokers.Allocated:N0} / {brokers.NoCapacity:N0})");
        await CheckStaleReportsAsync(context, pool);

        // w0-w5 are never touched: 60 slots for at most 12 units held.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }

    private static async Task AgentAsync(ScenarioContext context, string pool, string worker, long[] counts, CancellationToken stop)
    {
        using var client = context.NewClient($"agent-{worker}", TimeSpan.FromSeconds(20));
        var random = new Random(worker.GetHashCode(StringComparison.Ordinal));
        long epoch = await RegisterAsync(client, random, pool, worker, 10);
        while (!stop.IsCancellationRequested)
        {
            switch (random.Next(6))
            {
                case 0:
                    await UntilDefiniteAsync(() => client.DeregisterAsync(random.Next(client.Instances), pool, worker));
                    await Task.Delay(random.Next(20, 150), CancellationToken.None);
                    epoch = await RegisterAsync(client, random, pool, worker, 10);
                    Interlocked.Increment(ref counts[0]);
                    break;
                case 1:
                    await UntilDefiniteAsync(() => client.DrainAsync(random.Next(client.Instances), pool, worker));
                    await Task.Delay(random.Next(20, 150), CancellationToken.None);
                    await UntilDefiniteAsync(() => client.UndrainAsync(random.Next(client.Instances), pool, worker));
                    Interlocked.Increment(ref counts[1]);
                    break;
                case 2:
                    // Shrink (below the load: refused, 409) and grow back.
                    var shrunk = await client.RegisterAsync(random.Next(client.Instances), pool, worker, random.Next(1, 10));
                    epoch = shrunk.WorkerEpoch ?? epoch;
                    await Task.Delay(random.Next(20, 150), CancellationToken.None);
                    epoch = await RegisterAsync(client, random, pool, worker, 10);
                    Interlocked.Increment(ref counts[2]);
                    break;
                case 3 when epoch > 1:
                    await client.ReportLoadAsync(random.Next(client.Instances), pool, worker, epoch - 1, 10_000, knownStale: true);
                    Interlocked.Increment(ref counts[3]);
                    break;
                case 4:
                    await client.ReportLoadAsync(random.Next(client.Instances), pool, worker, epoch, random.Next(0, 5000));
                    Interlocked.Increment(ref counts[4]);
                    break;
                default:
                    // Re-register (the epoch advances), then a late report from the old registration.
                    var old = epoch;
                    epoch = await RegisterAsync(client, random, pool, worker, 10);
                    await client.ReportLoadAsync(random.Next(client.Instances), pool, worker, old, 10_000, knownStale: old < epoch);
                    Interlocked.Increment(ref counts[5]);
                    break;
            }

            await Task.Delay(random.Next(10, 60), CancellationToken.None);
        }

        // Leave the worker registered and available, so the brokers' last sessions can end normally.
        await UntilDefiniteAsync(() => client.UndrainAsync(random.Next(client.Instances), pool, worker));
    }

    /// <summary>
    /// Stale reports carry load index 10,000 and current ones less than 5,000: a worker whose stored
    /// index is 10,000 took a stale report (whatever it was answered).
    /// </summary>
    private static async Task CheckStaleReportsAsync(ScenarioContext context, string pool)
    {
        await using var connection = new Npgsql.NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        await using var command = new Npgsql.NpgsqlCommand(StaleMarkerSql.Replace("{schema}", Faults.Sql.Quote(context.Cluster.Schema), StringComparison.Ordinal), connection);
        command.Parameters.AddWithValue("pool", pool);
        await using var reader = await command.ExecuteReaderAsync(context.Cancellation);
        while (await reader.ReadAsync(context.Cancellation))
        {
            context.ScenarioViolations.Add($"worker {reader.GetString(0)} (epoch {reader.GetInt64(1)}) holds the load index only stale reports sent: a stale report took effect");
        }
    }

    private static readonly string StaleMarkerSql = Faults.Sql.Load("stale-marker.sql");

    /// <summary>Registers until the answer is ok; returns the worker's epoch.</summary>
    private static async Task<long> RegisterAsync(ApiClient client, Random random, string pool, string worker, int capacity)
    {
        for (var attempt = 0; ; attempt++)
        {
            var op = await client.RegisterAsync(random.Next(client.Instances), pool, worker, capacity);
            if (op is { Outcome: Outcome.Ok, WorkerEpoch: { } epoch })
            {
                return epoch;
            }

            if (attempt > 100)
            {
                throw new InvalidOperationException($"Registration of {worker} kept failing: {op}");
            }

            await Task.Delay(100, CancellationToken.None);
        }
    }

    private static async Task UntilDefiniteAsync(Func<Task<Operation>> call)
    {
        for (var attempt = 0; attempt < 100; attempt++)
        {
            if ((await call()).Outcome != Outcome.Unknown)
            {
                return;
            }

            await Task.Delay(100, CancellationToken.None);
        }
    }
}
