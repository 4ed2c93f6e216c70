using System.Collections.Concurrent;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>PostgreSQL stopped with <c>-m fast</c> or <c>-m immediate</c> mid-storm and started again (the scenarios' own server).</summary>
internal sealed class PostgresRestartScenario(string mode) : Scenario
{
    public override string Name => $"pg-restart-{mode}";

    public override string Proves =>
        $"PostgreSQL stopped with -m {mode}{(mode == "immediate" ? " (a crash: WAL recovery at start)" : "")} mid-storm, down for seconds, started again: successes survive the restart, calls during the outage answer 503 within the HTTP timeout, readiness turns unhealthy while the database is down and healthy again after, allocations resume.";

    public override ClusterKind Cluster => ClusterKind.PrivatePostgres;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var postgres = context.Postgres ?? throw new InvalidOperationException("This scenario needs the private PostgreSQL.");
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 8, capacity: 20);
        var brokers = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(10, 20), Pools = [pool], LeaselessShare = 0.5, RenewShare = 0.2, DrainTime = TimeSpan.FromSeconds(40) });

        // Brokers that never release (3 s leases): they keep calling allocate through the outage
        // while the others are busy retrying their releases.
        var allocators = new Brokers(context.NewClient, context.Pool("a"), new BrokerOptions { Clients = 4, Pools = [pool], Release = false, Lease = TimeSpan.FromSeconds(3), MinHold = TimeSpan.FromMilliseconds(300), MaxHold = TimeSpan.FromMilliseconds(500), DrainTime = TimeSpan.FromSeconds(40) });
        var downtime = context.Pick(TimeSpan.FromSeconds(4), TimeSpan.FromSeconds(8));
        var duration = context.Pick(TimeSpan.FromSeconds(18), TimeSpan.FromSeconds(45));

        using var stop = new CancellationTokenSource(duration);
        using var monitorStop = new CancellationTokenSource();
        var readiness = new ConcurrentQueue<(DateTimeOffset At, int Instance, bool Ready)>();
        var monitor = MonitorReadinessAsync(context, readiness, monitorStop.Token);
        var storm = Task.WhenAll(brokers.RunAsync(stop.Token), allocators.RunAsync(stop.Token));

        await context.Delay(duration * 0.25);
        var stoppedAt = Now;
        await postgres.StopAsync(mode, context.Cancellation);
        var down = Now;
        context.Fault($"pg_ctl stop -m {mode} (took {(down - stoppedAt).TotalSeconds:0.0} s)");
        await context.Delay(downtime);
        var starting = Now;
        await postgres.StartAgainAsync(context.Cancellation);
        var up = Now;
        context.Fault($"pg_ctl start after {(starting - down).TotalSeconds:0.0} s down (accepting connections {(up - starting).TotalSeconds:0.0} s later)");

        await storm;
        await monitorStop.CancelAsync();
        await monitor;
        context.Figure("sessions (allocated / no capacity)", $"{brokers.Sessions + allocators.Sessions:N0} ({brokers.Allocated + allocators.Allocated:N0} / {brokers.NoCapacity + allocators.NoCapacity:N0})");
        Judge(context, [.. readiness], down, starting, up);
        // 160 slots; at most 20 units held by the releasing brokers, and 4 x 3 s / 0.3 s = 40 by
        // the others (one allocation per 300 ms at most, 3 s leases): a "no capacity" is false.
        return new ScenarioResult([pool], new Expectations { NoCapacityImpossible = _ => true });
    }

    /// <summary>Readiness turned unhealthy while the database was down, and every instance was ready again soon after it came back.</summary>
    private static void Judge(ScenarioContext context, List<(DateTimeOffset At, int Instance, bool Ready)> samples, DateTimeOffset down, DateTimeOffset starting, DateTimeOffset up)
    {
        for (var instance = 0; instance < context.Cluster.Urls.Count; instance++)
        {
            var mine = samples.Where(s => s.Instance == instance).ToList();
            var unready = mine.FirstOrDefault(s => s.At >= down && s.At <= starting && !s.Ready);
            var readyWhileDown = mine.Where(s => s.At > down + TimeSpan.FromSeconds(1.5) && s.At < starting && s.Ready).ToList();
            var readyAgain = mine.FirstOrDefault(s => s.At >= up && s.Ready);
            context.Figure($"instance {instance} readiness",
                $"unready {(unready == default ? "never" : $"{(unready.At - down).TotalSeconds:0.0} s after the stop")}, ready again {(readyAgain == default ? "never" : $"{(readyAgain.At - up).TotalSeconds:0.0} s after the start")}");
            if (unready == default)
            {
                context.ScenarioViolations.Add($"instance {instance}: /health/ready never reported unhealthy while the database was down");
            }

            if (readyWhileDown.Count > 0)
            {
                context.ScenarioViolations.Add($"instance {instance}: /health/ready answered healthy {readyWhileDown.Count} times while the database was down");
            }

            if (readyAgain == default || readyAgain.At - up > TimeSpan.FromSeconds(15))
            {
                context.ScenarioViolations.Add($"instance {instance}: /health/ready not healthy again within 15 s of the database's return");
            }
        }

        // Allocations resume: the first success whose call began after the database was back.
        var back = context.History.Operations.Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok }).ToList();
        context.Figure("allocations succeeding during the outage", back.Count(o => o.InvokedAt > down && o.CompletedAt < starting).ToString(System.Globalization.CultureInfo.InvariantCulture));
        var resumed = back.Where(o => o.InvokedAt >= up).Select(o => o.CompletedAt).DefaultIfEmpty().Min();
        context.Figure("first allocation after the start", resumed == default ? "none" : $"{(resumed - up).TotalSeconds:0.0} s");
        if (resumed == default)
        {
            context.ScenarioViolations.Add("no allocation succeeded after the database came back");
        }
    }

    private static DateTimeOffset Now => TimeProvider.System.GetUtcNow();

    private static async Task MonitorReadinessAsync(ScenarioContext context, ConcurrentQueue<(DateTimeOffset, int, bool)> samples, CancellationToken stop)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(10) };
        while (!stop.IsCancellationRequested)
        {
            await Task.WhenAll(context.Cluster.Urls.Select(async (url, i) =>
            {
                bool ready;
                try
                {
                    using var response = await http.GetAsync(new Uri(url, "health/ready"), CancellationToken.None);
                    ready = response.IsSuccessStatusCode;
                }
                catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
                {
                    ready = false;
                }

                samples.Enqueue((Now, i, ready));
            }));
            try
            {
                await Task.Delay(250, stop);
            }
            catch (OperationCanceledException)
            {
                return;
            }
        }
    }
}
