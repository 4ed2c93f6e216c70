using System.Globalization;
using Allocator.Reliability.Checking;
using Allocator.Reliability.History;
using Allocator.Reliability.Workload;

namespace Allocator.Reliability.Scenarios;

/// <summary>
/// PostgreSQL fails over (issue 48): the primary is killed (<c>kill -9</c> of its postmaster) and
/// its synchronous standby promoted, under load from raw brokers and brokers on the .NET client;
/// in the full run the old primary is then rewound and rejoins as the new standby, and a second
/// failover goes back. The instances reach the pair through one connection string naming both
/// servers; the checker reads the promoted one.
/// </summary>
/// <param name="asynchronous">
/// The standby is asynchronous and lags (its WAL receiver held back for a few seconds before the
/// kill, and killed with what it had not read): a measurement of what such a failover loses and
/// what brokers then see, not run in CI.
/// </param>
internal sealed class PostgresFailoverScenario(bool asynchronous = false) : Scenario
{
    /// <summary>What a failover to a standby that lacks answered commits breaks, measured rather than judged.</summary>
    private static readonly IReadOnlySet<Invariant> LostWithTheCommits = new HashSet<Invariant>
    {
        Invariant.RepliesCommitted, Invariant.OneAllocationPerKey, Invariant.FreedOnce, Invariant.HeldMeansHeld,
        Invariant.FailureMeansNothing, Invariant.Fencing, Invariant.NothingStuck,
    };

    /// <summary>Issue 48's bound, held in the full run: every pool served again through every instance within this of the promotion.</summary>
    private static readonly TimeSpan ServedAgainWithin = TimeSpan.FromSeconds(5);

    /// <summary>How long a failover may take to be served again through every instance before the scenario gives up waiting.</summary>
    private static readonly TimeSpan WaitLimit = TimeSpan.FromSeconds(60);

    public override string Name => asynchronous ? "pg-failover-async" : "pg-failover";

    public override bool InContinuousIntegration => !asynchronous;

    public override string Proves => asynchronous
        ? "The same failover with an asynchronous standby that lags: its WAL receiver held back (SIGSTOP) for the last seconds before the primary is killed, then killed with what it had not read, and the standby promoted (quick and full: once). A measurement, not run in CI: how many allocations answered 2xx are missing on the promoted server, what brokers then see of them (reads, releases, renewals; keys allocated again), fencing epochs handed out twice; the invariants those losses break are reported as losses, every other one still holds (capacity, no 500, no reply past the HTTP timeout, owners), and /health said 'asynchronous' before."
        : "The PostgreSQL primary killed (kill -9 of its postmaster) and its synchronous streaming standby promoted (pg_ctl promote, through eng/postgres.sh) mid-storm, the instances on one connection string naming both servers (quick: once; full: then the old primary rewound and rejoined as the new standby, and a second failover back): every allocation answered before the kill is on the promoted server, no fencing epoch is reused, every call during the failover answered 503 with Retry-After (never a 500), no failed call for brokers on the .NET client, and every instance served the pool again (full: within 5 s of each promotion); each failover's time from the kill to the promotion and from the promotion to the first success through each instance.";

    public override ClusterKind Cluster => asynchronous ? ClusterKind.StandbyAsync : ClusterKind.Standby;

    public override async Task<ScenarioResult> RunAsync(ScenarioContext context)
    {
        var standby = context.Standby ?? throw new InvalidOperationException("This scenario needs a primary and a standby (ClusterKind.Standby).");
        var pool = context.Pool("p");
        await context.SetUpPoolAsync(pool, "{}", workers: 10, capacity: 20);
        var raw = new Brokers(context.NewClient, context.Pool("b"), new BrokerOptions { Clients = context.Pick(8, 12), Pools = [pool], LeaselessShare = 0.3, RenewShare = 0.2, HonorRetryAfter = true, DrainTime = TimeSpan.FromSeconds(40) });
        using var clients = new ClientBrokers(context.History, context.Cluster.Urls, Allocator.Reliability.Cluster.HostCluster.ApiKey, context.Pool("c"), clients: 8, pace: context.Pace);
        using var stop = new CancellationTokenSource();
        var storm = Task.WhenAll(raw.RunAsync(stop.Token), clients.RunAsync(pool, stop.Token));
        await CheckReportedReplicationAsync(context, asynchronous ? "asynchronous" : "synchronous");

        var failovers = asynchronous ? 1 : context.Pick(1, 2);
        var lag = context.Pick(TimeSpan.FromSeconds(2), TimeSpan.FromSeconds(4));
        var lostSince = DateTimeOffset.MaxValue;
        var lastPromotion = DateTimeOffset.MinValue;
        var calm = context.Pick(TimeSpan.FromSeconds(4), TimeSpan.FromSeconds(10));
        List<double> promotions = [];
        List<double> servedAgain = [];
        for (var round = 1; round <= failovers; round++)
        {
            await context.Delay(calm);
            if (round > 1)
            {
                // The old primary follows the new one again (pg_rewind), under load: the next
                // failover goes back to it.
                var rejoining = Outage.Now;
                await standby.RejoinAsync(context.Cancellation);
                context.Fault(string.Create(CultureInfo.InvariantCulture, $"rejoin: the old primary rewound and streaming from the new one ({(Outage.Now - rejoining).TotalSeconds:0.0} s)"));
                await context.Delay(calm);
            }

            var receiver = 0;
            if (asynchronous)
            {
                // What the primary commits from now on does not reach the standby.
                receiver = await standby.HoldBackReceiverAsync(context.Cancellation);
                lostSince = Outage.Now;
                context.Fault($"the standby's WAL receiver held back (SIGSTOP) for {lag.TotalSeconds:0} s before the kill");
                await context.Delay(lag);
            }

            var killedAt = Outage.Now;
            var killed = await standby.KillPrimaryAsync(context.Cancellation);
            if (asynchronous)
            {
                await standby.DropHeldBackAsync(receiver, context.Cancellation);
            }

            // An operator's (or Patroni's) decision takes a moment; the promotion waits until the
            // standby takes writes.
            await context.Delay(TimeSpan.FromSeconds(1));
            await standby.PromoteAsync(context.Cancellation);
            var promotedAt = Outage.Now;
            lastPromotion = promotedAt;
            promotions.Add((promotedAt - killedAt).TotalSeconds);

            var served = await WaitServedThroughEveryInstanceAsync(context, pool, killedAt, promotedAt);
            var worst = served.Values.Max();
            if (worst is { } w)
            {
                servedAgain.Add(w.TotalSeconds);
            }

            var answered503 = context.History.Operations.Count(o => o.Status == 503 && o.InvokedAt >= killedAt && o.CompletedAt <= promotedAt + (worst ?? WaitLimit));
            context.Fault(string.Create(CultureInfo.InvariantCulture,
                $"failover {round}: kill -9 of the primary ({killed}), promoted {(promotedAt - killedAt).TotalSeconds:0.0} s later; first allocation after the promotion through {string.Join(", ", served.Select(s => $"instance {s.Key}: {Seconds(s.Value)}"))}; 503 answers in between {answered503}"));
            if (served.Values.Any(v => v is null))
            {
                context.ScenarioViolations.Add($"failover {round}: an instance served no allocation within {WaitLimit.TotalSeconds:0} s of the promotion");
            }
            else if (!context.Quick && worst > ServedAgainWithin)
            {
                context.ScenarioViolations.Add(string.Create(CultureInfo.InvariantCulture, $"failover {round}: the pool was served again through every instance {worst!.Value.TotalSeconds:0.00} s after the promotion; the bound is {ServedAgainWithin.TotalSeconds:0} s"));
            }
        }

        await context.Delay(calm);
        await stop.CancelAsync();
        await storm;

        var since = context.History.Operations.Where(o => o.Kind == OperationKind.Allocate).ToList();
        context.Figure("kill to promotion, s (each failover)", string.Join(", ", promotions.Select(p => p.ToString("0.0", CultureInfo.InvariantCulture))));
        context.Figure("promotion to the pool served through every instance, s (each failover)", string.Join(", ", servedAgain.Select(p => p.ToString("0.00", CultureInfo.InvariantCulture))));
        context.Figure("503 answers (outcome unknown / nothing written)", $"{since.Count(o => o.Status == 503 && o.Problem == "outcome-unknown"):N0} / {since.Count(o => o.Status == 503 && o.Problem != "outcome-unknown"):N0} of the allocations; every 503 carries Retry-After: {context.History.Operations.Where(o => o.Status == 503).All(o => o.RetryAfter is not null)}");
        context.Figure("sessions (raw brokers: allocated / no capacity)", $"{raw.Sessions:N0} ({raw.Allocated:N0} / {raw.NoCapacity:N0})");
        context.Figure("broker sessions allocated (.NET client)", $"{clients.Allocated:N0}");
        context.Figure("failed calls (.NET client)", asynchronous ? $"{clients.Failed:N0} (releases and renewals of lost allocations: {string.Join(" | ", clients.Failures.Take(2))})" : $"{clients.Failed:N0}");
        context.Figure("replication at the end", (await standby.StatusAsync(context.Cancellation)).Trim().Replace('\n', ';'));
        if (clients.Failed > 0 && !asynchronous)
        {
            context.ScenarioViolations.Add($"{clients.Failed} calls failed for brokers on the .NET client: {string.Join(" | ", clients.Failures)}");
        }

        if (asynchronous)
        {
            await MeasureLossesAsync(context, pool, lostSince, lastPromotion);
        }

        // Fencing epochs come from one sequence: a promoted server whose sequence lagged would hand
        // out an epoch again (two allocations with one fencing token).
        var answered = context.History.Operations
            .Where(o => o is { Kind: OperationKind.Allocate or OperationKind.Renew, Outcome: Outcome.Ok, Allocation: not null })
            .Select(o => (o.Allocation!.Epoch, o.Allocation.AllocationId))
            .Distinct()
            .ToList();
        var reused = answered.GroupBy(a => a.Epoch).Where(g => g.Select(a => a.AllocationId).Distinct().Count() > 1).ToList();
        context.Figure(asynchronous ? "fencing epochs answered (distinct / handed to two allocations: a lost one and a later one)" : "fencing epochs answered (distinct / handed to two allocations)", $"{answered.Select(a => a.Epoch).Distinct().Count():N0} / {reused.Count:N0}");
        if (reused.Count > 0 && !asynchronous)
        {
            context.ScenarioViolations.Add($"{reused.Count} fencing epochs were answered for two allocations, e.g. {reused[0].Key}: {string.Join(", ", reused[0].Select(a => a.AllocationId))}");
        }

        var next = await NextEpochAsync(context);
        if (answered.Count > 0 && next <= answered.Max(a => a.Epoch) && !asynchronous)
        {
            context.ScenarioViolations.Add($"the promoted server's epoch sequence would hand out {next} next, not above the {answered.Max(a => a.Epoch)} already answered");
        }

        var without = context.History.Operations.Where(o => o.Status == 503 && o.RetryAfter is null).ToList();
        if (without.Count > 0)
        {
            context.ScenarioViolations.Add($"{without.Count} answers 503 without Retry-After");
        }

        return new ScenarioResult([pool], new Expectations(), Measured: asynchronous ? LostWithTheCommits : null);
    }

    /// <summary>Every instance's <c>/health</c> names the replication the pair runs with (issue 48: the service says what it runs on).</summary>
    private static async Task CheckReportedReplicationAsync(ScenarioContext context, string expected)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(10) };
        List<string> said = [];
        foreach (var url in context.Cluster.Urls)
        {
            // Read at start and every 30 s: the first reading is there once the instance is ready.
            var reported = "";
            for (var attempt = 0; attempt < 20 && reported != expected; attempt++, await context.Delay(TimeSpan.FromMilliseconds(250)))
            {
                using var body = System.Text.Json.JsonDocument.Parse(await http.GetStringAsync(new Uri(url, "health"), context.Cancellation));
                reported = body.RootElement.TryGetProperty("replication", out var replication) && replication.TryGetProperty("default", out var mode) ? mode.GetString() ?? "" : "(not reported)";
            }

            said.Add(reported);
            if (reported != expected)
            {
                context.ScenarioViolations.Add($"/health of {url} says the replication is '{reported}', not '{expected}'");
            }
        }

        context.Figure("replication as /health said it before the failover", string.Join(", ", said));
    }

    /// <summary>
    /// What the promoted server lacks of what was answered, and what brokers saw of it afterwards
    /// (an asynchronous standby's failover).
    /// </summary>
    private static async Task MeasureLossesAsync(ScenarioContext context, string pool, DateTimeOffset lostSince, DateTimeOffset promotedAt)
    {
        var answered = context.History.Operations
            .Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok, Allocation: not null } && o.Pool == pool)
            .GroupBy(o => o.Allocation!.AllocationId)
            .ToDictionary(g => g.Key, g => g.First());
        await using var connection = new Npgsql.NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        var schema = Faults.Sql.Quote(context.Cluster.Schema);
        await using var command = new Npgsql.NpgsqlCommand(
            $"SELECT allocation_id FROM {schema}.allocations WHERE allocation_id = ANY (@ids) UNION ALL SELECT allocation_id FROM {schema}.allocation_history WHERE allocation_id = ANY (@ids)", connection);
        command.Parameters.AddWithValue("ids", answered.Keys.ToArray());
        HashSet<Guid> stored = [];
        await using (var reader = await command.ExecuteReaderAsync(context.Cancellation))
        {
            while (await reader.ReadAsync(context.Cancellation))
            {
                stored.Add(reader.GetGuid(0));
            }
        }

        var lost = answered.Where(a => !stored.Contains(a.Key)).ToDictionary(a => a.Key, a => a.Value);
        var window = answered.Values.Count(o => o.CompletedAt >= lostSince);
        context.Figure("answered allocations lost (answered 2xx, missing on the promoted server) / answered while the standby lagged",
            $"{lost.Count:N0} / {window:N0}; lost ones answered before the lag began: {lost.Values.Count(o => o.CompletedAt < lostSince):N0}");

        // What brokers saw afterwards of the allocations they had been given and that are gone.
        var seen = context.History.Operations
            .Where(o => o.AllocationId is { } id && lost.ContainsKey(id) && o.Kind != OperationKind.Allocate && o.InvokedAt >= promotedAt)
            .GroupBy(o => $"{o.Kind.ToString().ToLowerInvariant()} {(o.Status == 0 ? "no answer" : o.Status.ToString(CultureInfo.InvariantCulture))}{(o.Problem is { } p ? " " + p : "")}")
            .OrderBy(g => g.Key, StringComparer.Ordinal)
            .Select(g => $"{g.Key} x{g.Count()}");
        context.Figure("brokers' calls on lost allocations after the promotion", string.Join(", ", seen) is { Length: > 0 } s ? s : "none");
        var lostKeys = lost.Values.Select(o => o.Key).Where(k => k is not null).ToHashSet(StringComparer.Ordinal);
        var again = context.History.Operations.Count(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok, Allocation: not null } && lostKeys.Contains(o.Key) && !lost.ContainsKey(o.Allocation!.AllocationId));
        context.Figure("lost allocations' keys answered again with another allocation", $"{again:N0}");
    }

    /// <summary>
    /// Per instance, the first allocation begun after the kill that succeeded, as time after the
    /// promotion (zero when it came sooner; null: none within <see cref="WaitLimit"/>).
    /// </summary>
    private static async Task<Dictionary<int, TimeSpan?>> WaitServedThroughEveryInstanceAsync(ScenarioContext context, string pool, DateTimeOffset killedAt, DateTimeOffset promotedAt)
    {
        var instances = Enumerable.Range(0, context.Cluster.Urls.Count).ToList();
        Dictionary<int, TimeSpan?> served = instances.ToDictionary(i => i, _ => (TimeSpan?)null);
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); clock.Elapsed < WaitLimit && served.Values.Any(v => v is null); await context.Delay(TimeSpan.FromMilliseconds(100)))
        {
            foreach (var instance in instances.Where(i => served[i] is null))
            {
                var first = context.History.Operations
                    .Where(o => o.Kind == OperationKind.Allocate && o.Instance == instance && o.Outcome == Outcome.Ok && o.InvokedAt >= killedAt && o.CompletedAt >= promotedAt)
                    .Select(o => (DateTimeOffset?)o.CompletedAt)
                    .Min();
                if (first is { } at)
                {
                    served[instance] = at - promotedAt;
                }
            }
        }

        return served;
    }

    /// <summary>The epoch the server now primary would hand out next (without taking it).</summary>
    private static async Task<long> NextEpochAsync(ScenarioContext context)
    {
        await using var connection = new Npgsql.NpgsqlConnection(context.DirectConnectionString);
        await connection.OpenAsync(context.Cancellation);
        await using var command = new Npgsql.NpgsqlCommand($"SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {Faults.Sql.Quote(context.Cluster.Schema)}.allocation_epoch", connection);
        return (long)(await command.ExecuteScalarAsync(context.Cancellation))!;
    }

    private static string Seconds(TimeSpan? value) => value is { } v ? v.TotalSeconds.ToString("0.00", CultureInfo.InvariantCulture) + " s" : "none";
}
