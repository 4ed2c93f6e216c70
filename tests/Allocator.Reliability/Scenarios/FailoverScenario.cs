using System.Globalization;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;
using Npgsql;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// Failover after <c>kill -9</c> (issue 21 #3): brokers on the .NET client keep allocating and
/// releasing through the instances that survive while the instance hosting the pool's grain is
/// killed, again and again; each kill is timed to the first allocation that succeeds after it.
/// </summary>
internal sealed class FailoverScenario : Scenario
{
    private static readonly string DeclaredDeadSql = Faults.Sql.Load("silo-declared-dead.sql");

    public override string Name => "failover";

    public override string Proves =>
        "SIGKILL of the instance hosting the pool's grain (quick: 2 times, full: 10), each time restarted after the pool serves again, while 12 brokers on the .NET client (AddAllocatorClient: retries 503 with the same key after Retry-After) allocate and release through the other instances: no call fails, every success committed; each kill's time to the first allocation sent after it that succeeds, and to the death declaration in the membership table.";

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        using var brokers = new ClientBrokers(context.History, context.Cluster.Urls, Allocator.Reliability.Cluster.HostCluster.ApiKey, context.Pool("c"), clients: 12, pace: context.Pace);
        using var stop = new CancellationTokenSource();
        var storm = brokers.RunAsync(pool, stop.Token);
        await context.Delay(TimeSpan.FromSeconds(3));

        using var probe = context.NewClient("probe", TimeSpan.FromSeconds(10));
        List<double> firstSuccess = [];
        List<double> declaredDead = [];
        var kills = context.Pick(2, 10);
        for (var kill = 1; kill <= kills; kill++)
        {
            var silo = await probe.GrainSiloAsync(0, pool) ?? await probe.GrainSiloAsync(1, pool);
            var victim = context.Cluster.InstanceOfSilo(silo) ?? 0;

            // The victim leaves the rotation first (as a load balancer's health check would take
            // a dead instance out): the measurement is the cluster's failover, not connections
            // to a dead port. Calls through the others to its grain are what must survive.
            brokers.Avoid = victim;
            await context.Delay(TimeSpan.FromSeconds(1));
            var failedBefore = brokers.Failed;
            var killedAt = TimeProvider.System.GetUtcNow();
            context.Cluster.Kill(victim);
            var dead = WaitDeclaredDeadAsync(context, victim, killedAt);
            var served = await WaitFirstSuccessAsync(context, pool, killedAt);
            var deadAfter = await dead;
            await context.Cluster.RestartAsync(victim, context.Cancellation);
            brokers.Avoid = -1;
            var answered503 = context.History.Operations.Count(o => o.Status == 503 && o.Pool == pool && o.CompletedAt >= killedAt);
            var failed = brokers.Failed - failedBefore;
            if (served is { } s)
            {
                firstSuccess.Add(s.TotalSeconds);
            }

            if (deadAfter is { } d)
            {
                declaredDead.Add(d.TotalSeconds);
            }

            context.Fault(string.Create(CultureInfo.InvariantCulture,
                $"kill {kill}: SIGKILL instance {victim} (hosting the grain); first allocation sent after it succeeded {Seconds(served)} s after the kill; declared dead after {Seconds(deadAfter)} s; 503 answers since the kill (retried by the client) {answered503}; failed calls {failed}"));
            await context.Delay(TimeSpan.FromSeconds(2));
        }

        await stop.CancelAsync();
        await storm;
        context.Figure("first success after kill -9, s (each kill)", string.Join(", ", firstSuccess.Select(v => v.ToString("0.00", CultureInfo.InvariantCulture))));
        context.Figure("first success after kill -9, s (median / worst)", string.Create(CultureInfo.InvariantCulture, $"{Median(firstSuccess):0.00} / {(firstSuccess.Count == 0 ? double.NaN : firstSuccess.Max()):0.00}"));
        context.Figure("declared dead after kill -9, s (median / worst)", string.Create(CultureInfo.InvariantCulture, $"{Median(declaredDead):0.00} / {(declaredDead.Count == 0 ? double.NaN : declaredDead.Max()):0.00}"));
        context.Figure("broker sessions allocated (.NET client)", $"{brokers.Allocated:N0}");
        context.Figure("failed calls (.NET client)", brokers.Failed, "0");
        if (firstSuccess.Count < kills)
        {
            context.ScenarioViolations.Add($"allocations did not resume within 30 s after {kills - firstSuccess.Count} of {kills} kills");
        }

        if (brokers.Failed > 0)
        {
            context.ScenarioViolations.Add($"{brokers.Failed} calls failed for brokers on the .NET client: {string.Join(" | ", brokers.Failures)}");
        }

        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = op => op.Pool == pool });
    }

    /// <summary>The first allocation sent after the kill that succeeded, as time after the kill (null: none within 30 s).</summary>
    private static async Task<TimeSpan?> WaitFirstSuccessAsync(ScenarioContext context, string pool, DateTimeOffset killedAt)
    {
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); clock.Elapsed < TimeSpan.FromSeconds(30); await context.Delay(TimeSpan.FromMilliseconds(100)))
        {
            var first = context.History.Operations
                .Where(o => o.Kind == OperationKind.Allocate && o.Pool == pool && o.Outcome == Outcome.Ok && o.InvokedAt >= killedAt)
                .Select(o => (DateTimeOffset?)o.CompletedAt)
                .Min();
            if (first is { } at)
            {
                return at - killedAt;
            }
        }

        return null;
    }

    /// <summary>When the membership table first shows the killed silo dead (null: not within 30 s).</summary>
    private static async Task<TimeSpan?> WaitDeclaredDeadAsync(ScenarioContext context, int victim, DateTimeOffset killedAt)
    {
        await using var connection = new NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        await using var command = new NpgsqlCommand(DeclaredDeadSql, connection);
        command.Parameters.AddWithValue("cluster", context.Cluster.Id);
        command.Parameters.AddWithValue("port", context.Cluster.SiloPortOf(victim));
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); clock.Elapsed < TimeSpan.FromSeconds(30); await context.Delay(TimeSpan.FromMilliseconds(50)))
        {
            if ((bool)(await command.ExecuteScalarAsync(context.Cancellation))!)
            {
                return TimeProvider.System.GetUtcNow() - killedAt;
            }
        }

        return null;
    }

    private static string Seconds(TimeSpan? value) => value is { } v ? v.TotalSeconds.ToString("0.00", CultureInfo.InvariantCulture) : "(none within 30 s)";

    private static double Median(List<double> values)
    {
        if (values.Count == 0)
        {
            return double.NaN;
        }

        var sorted = values.Order().ToList();
        return sorted.Count % 2 == 1 ? sorted[sorted.Count / 2] : (sorted[(sorted.Count / 2) - 1] + sorted[sorted.Count / 2]) / 2;
    }
}
