using System.Collections.Concurrent;
using System.Globalization;
using Allocator.LoadTests.Scale;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// Issue 23: pools on two databases (two PostgreSQL servers); the server of database <c>b</c> is
/// stopped under load and started again. Only b's pools may be unavailable; a's keep their
/// throughput, and nothing is lost on either side (the checker runs on each database).
/// </summary>
/// <param name="frozen">
/// Issue 39, #9: b's server is frozen (SIGSTOP to every process of it) rather than stopped: a
/// database that hangs. Its callers must still be answered 503 with Retry-After within their
/// deadline, and a's pools keep going although the silo's store slots are shared by both.
/// </param>
internal sealed class DatabaseDownScenario(bool frozen = false) : Scenario
{
    public override string Name => frozen ? "db-frozen" : "db-down";

    public override string Proves => frozen
        ? "Pools on two PostgreSQL servers; b's server frozen (SIGSTOP to every process of it: connections stay open, nothing answers) under load, then thawed: only b's pools answer 503 (with Retry-After) while it hangs, each within the HTTP deadline, the other database's pools keep their throughput (within 10% of before; quick: at least half, the machine being shared) although the silo's store slots are shared, instances stay ready (degraded), b's pools resume, and the checker finds nothing lost on either database (statements held by the freeze commit after it)."
        : "Pools on two PostgreSQL servers; b's server stopped (pg_ctl -m fast) under load and started again: only b's pools answer 503 (with Retry-After) while it is down, the other database's pools keep their throughput (within 10% of before; quick: at least half, the machine being shared) and latency, instances stay ready (degraded), b's pools resume, and the checker finds nothing lost on either database.";

    public override ClusterKind Cluster => ClusterKind.TwoDatabases;

    public override bool TimedSecondBySecond => true;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var postgres = context.Postgres ?? throw new InvalidOperationException("This scenario needs the private PostgreSQL of database b.");
        var second = context.SecondDirectConnectionString ?? throw new InvalidOperationException("This scenario needs database b.");
        var poolsA = Enumerable.Range(0, 3).Select(i => context.Pool($"a{i}")).ToList();
        var poolsB = Enumerable.Range(0, 3).Select(i => context.Pool($"b{i}")).ToList();
        foreach (var pool in poolsA)
        {
            await context.SetUpPoolAsync(pool, """{"database":"default"}""", workers: 8, capacity: 20);
        }

        foreach (var pool in poolsB)
        {
            await context.SetUpPoolAsync(pool, """{"database":"b"}""", workers: 8, capacity: 20);
        }

        BrokerOptions Options(IReadOnlyList<string> pools) => new()
        {
            Clients = context.Pick(8, 12),
            Pools = pools,
            LeaselessShare = 0.3,
            MinHold = TimeSpan.FromMilliseconds(10),
            MaxHold = TimeSpan.FromMilliseconds(60),
            HonorRetryAfter = true,
            DrainTime = TimeSpan.FromSeconds(40),
        };
        var brokersA = new Brokers(context.NewClient, context.Pool("ba"), Options(poolsA));
        var brokersB = new Brokers(context.NewClient, context.Pool("bb"), Options(poolsB));
        var phase = context.Pick(TimeSpan.FromSeconds(8), TimeSpan.FromSeconds(20));
        var settle = TimeSpan.FromSeconds(2);

        using var stop = new CancellationTokenSource();
        using var monitorStop = new CancellationTokenSource();
        var readiness = new ConcurrentQueue<ReadinessSample>();
        var monitor = Outage.MonitorReadinessAsync(context, readiness, monitorStop.Token);
        var storm = Task.WhenAll(brokersA.RunAsync(stop.Token), brokersB.RunAsync(stop.Token));

        await context.Delay(settle);
        var before = (From: Outage.Now, To: Outage.Now + phase);
        var busy = new List<(string Phase, double Cores)>();
        var machine = CpuTime.OfMachine();
        void Busy(string name, TimeSpan length)
        {
            // The machine is shared: how busy it was (all processes, ours and others') explains a phase's figures.
            var now = CpuTime.OfMachine();
            busy.Add((name, (now.Busy - machine.Busy) / CpuTime.TicksPerSecond / length.TotalSeconds));
            machine = now;
        }

        await context.Delay(phase);
        Busy("before", phase);
        var stopping = Outage.Now;
        if (frozen)
        {
            var processes = await postgres.FreezeAsync(context.Cancellation);
            context.Fault($"database b: SIGSTOP to its {processes} server processes");
        }
        else
        {
            await postgres.StopAsync("fast", context.Cancellation);
        }

        var down = Outage.Now;
        if (!frozen)
        {
            context.Fault($"database b: pg_ctl stop -m fast (took {(down - stopping).TotalSeconds:0.0} s)");
        }

        var during = (From: down + TimeSpan.FromSeconds(1), To: down + TimeSpan.FromSeconds(1) + phase);
        await context.Delay(during.From - Outage.Now);
        machine = CpuTime.OfMachine();
        await context.Delay(during.To - Outage.Now);
        Busy("during", phase);
        var starting = Outage.Now;
        if (frozen)
        {
            await postgres.ThawAsync(context.Cancellation);
        }
        else
        {
            await postgres.StartAgainAsync(context.Cancellation);
        }

        var up = Outage.Now;
        context.Fault(frozen
            ? $"database b: SIGCONT after {(starting - down).TotalSeconds:0.0} s frozen"
            : $"database b: pg_ctl start after {(starting - down).TotalSeconds:0.0} s down (accepting connections {(up - starting).TotalSeconds:0.0} s later)");
        var after = (From: up + settle, To: up + settle + phase);
        await context.Delay(after.From - Outage.Now);
        machine = CpuTime.OfMachine();
        await context.Delay(after.To - Outage.Now);
        Busy("after", phase);
        await stop.CancelAsync();
        await storm;
        await monitorStop.CancelAsync();
        await monitor;

        var allocations = context.History.Operations.Where(o => o.Kind == OperationKind.Allocate).ToList();
        var rates = new Dictionary<string, double>(StringComparer.Ordinal);
        foreach (var (database, pools) in new[] { ("a", poolsA), ("b", poolsB) })
        {
            foreach (var (name, window) in new[] { ("before", before), ("during", during), ("after", after) })
            {
                var ok = allocations.Where(o => o.Outcome == Outcome.Ok && pools.Contains(o.Pool) && o.CompletedAt >= window.From && o.CompletedAt < window.To).ToList();
                var rate = ok.Count / (window.To - window.From).TotalSeconds;
                rates[$"{database} {name}"] = rate;
                var latencies = ok.Select(o => o.Duration.TotalMilliseconds).Order().ToList();
                context.Figure($"database {database} {name}: allocations/s, p50 / p99 ms",
                    latencies.Count == 0 ? "0/s" : string.Create(CultureInfo.InvariantCulture, $"{rate:0.0}/s, {Percentile(latencies, 0.5):0.0} / {Percentile(latencies, 0.99):0.0}"));
            }
        }

        context.Figure($"machine busy, cores of {Environment.ProcessorCount} (before / during / after)", string.Join(" / ", busy.Select(b => b.Cores.ToString("0.00", CultureInfo.InvariantCulture))));
        var ratio = rates["a before"] == 0 ? 0 : rates["a during"] / rates["a before"];
        context.Figure("database a: throughput during b's outage / before", ratio, "0.00");

        // The full run (under the measurement lock) holds a's pools to 90% of their throughput before
        // the outage, as issue 23 asks. The quick run is CI's, on a machine whose other work swings
        // by a core within seconds (8 s phases), so there it guards against what sharing b's fate
        // would look like, a's pools stalling, not against the machine (0.86 once while another
        // workload took the other core).
        var required = context.Pick(0.5, 0.9);
        if (ratio < required)
        {
            context.ScenarioViolations.Add(string.Create(CultureInfo.InvariantCulture, $"database a's pools fell to {ratio:P0} of their throughput while b was down (at least {required:P0} required)"));
        }

        // No stall either: a's slowest second while b is down or frozen keeps a quarter of a's
        // average second before. (Issue 39, #9: with a frozen b, a stalled for about 3 s each time
        // b's statements timed out, the silo's threads blocked in Npgsql's cancellations.)
        var perSecond = Enumerable.Range(0, (int)(during.To - during.From).TotalSeconds)
            .Select(i => allocations.Count(o => o.Outcome == Outcome.Ok && poolsA.Contains(o.Pool) && o.CompletedAt >= during.From + TimeSpan.FromSeconds(i) && o.CompletedAt < during.From + TimeSpan.FromSeconds(i + 1)))
            .ToList();
        var slowestSecond = perSecond.Count == 0 ? 0 : perSecond.Min();
        context.Figure("database a: allocations in its slowest second while b was out / its average second before", string.Create(CultureInfo.InvariantCulture, $"{slowestSecond} / {rates["a before"]:0}"));
        if (slowestSecond < rates["a before"] / 4)
        {
            context.ScenarioViolations.Add(string.Create(CultureInfo.InvariantCulture, $"database a's pools stalled while b was out: {slowestSecond} allocations in their slowest second, against {rates["a before"]:0} a second before (per second: {string.Join(' ', perSecond)})"));
        }

        // b's pools: nothing answered from the database while it was down; every 503 said when to retry.
        var outage = allocations.Where(o => poolsB.Contains(o.Pool) && o.InvokedAt >= during.From && o.CompletedAt <= starting).ToList();
        context.Figure("database b during the outage: allocate answers", string.Join(", ", outage.GroupBy(o => $"{o.Status} {o.Problem}").OrderBy(g => g.Key, StringComparer.Ordinal).Select(g => $"{g.Key} x{g.Count()}")));
        foreach (var op in outage.Where(o => o.Outcome == Outcome.Ok).Take(3))
        {
            context.ScenarioViolations.Add($"{op}: succeeded while b's server was stopped");
        }

        if (frozen)
        {
            // A hung database answers nothing: its callers must be answered by the service's own
            // deadlines (the request timeout, plus the allocation's wait), never held past them.
            var deadline = context.Cluster.Timeouts.Request + TimeSpan.FromSeconds(2);
            var sent = allocations.Where(o => poolsB.Contains(o.Pool) && o.InvokedAt >= down && o.InvokedAt < starting).ToList();
            var late = sent.Where(o => o.Duration > deadline + o.MaxWait || (o.Status == 0 && o.Problem != ApiClient.Refused)).ToList();
            var slowest = sent.Count == 0 ? 0 : sent.Max(o => o.Duration.TotalSeconds);
            context.Figure("database b while frozen: slowest allocate answer, s", slowest, "0.0");
            foreach (var op in late.Take(3))
            {
                context.ScenarioViolations.Add($"{op}: answered after {op.Duration.TotalSeconds:0.0} s (or not at all) while b hung; the deadline is {deadline.TotalSeconds:0.0} s");
            }
        }

        var withoutRetryAfter = context.History.Operations.Where(o => o.Status == 503 && o.RetryAfter is null).ToList();
        foreach (var op in withoutRetryAfter.Take(3))
        {
            context.ScenarioViolations.Add($"{op}: 503 without Retry-After");
        }

        var onA = allocations.Where(o => poolsA.Contains(o.Pool) && o.InvokedAt >= down && o.CompletedAt <= up && o.Status >= 500).ToList();
        context.Figure("database a during the outage: 5xx answers", onA.Count.ToString(CultureInfo.InvariantCulture));
        foreach (var op in onA.Take(3))
        {
            context.ScenarioViolations.Add($"{op}: a pool of database a answered {op.Status} while only b was down");
        }

        if (rates["b after"] == 0)
        {
            context.ScenarioViolations.Add("database b's pools did not resume after its server came back");
        }

        // Instances keep their place behind a load balancer: readiness is degraded (200), never 503.
        var unready = readiness.Where(s => !s.Ready).ToList();
        context.Figure("readiness probes during the run (ready / unready)", $"{readiness.Count - unready.Count} / {unready.Count}");
        if (unready.Count > 0)
        {
            context.ScenarioViolations.Add($"/health/ready answered unready {unready.Count} times although database a was up throughout");
        }

        context.Figure("sessions a / b (allocated)", $"{brokersA.Sessions:N0} ({brokersA.Allocated:N0}) / {brokersB.Sessions:N0} ({brokersB.Allocated:N0})");

        // 160 slots per pool, at most 12 brokers holding one unit each on a database: never full.
        return new ScenarioResult(
            [.. poolsA, .. poolsB],
            new Expectations { NoCapacityImpossible = _ => true },
            [("a", context.DirectConnectionString, poolsA), ("b", second, poolsB)]);
    }

    private static double Percentile(List<double> sorted, double q) => sorted[Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1)];
}
