using Allocator.Reliability.Cluster;
using Allocator.Reliability.Faults;
using Allocator.Reliability.History;
using Npgsql;
using NpgsqlTypes;

namespace Allocator.Reliability.Checking;

/// <summary>What the scenario promises the checker about its pools.</summary>
internal sealed class Expectations
{
    /// <summary>
    /// True for a no-capacity answer that cannot be right: the scenario kept enough capacity
    /// that is never drained, deregistered or shrunk for every caller at once. Null: no such promise.
    /// </summary>
    public Func<Operation, bool>? NoCapacityImpossible { get; init; }

    /// <summary>
    /// True for a call the scenario froze in flight: sent to an instance before it was paused
    /// (SIGSTOP), still open when the pause began. Nothing answers within the HTTP timeout while
    /// the process does not run, so <see cref="Invariant.HttpTimeout"/> does not judge it; every
    /// other invariant does. Null: no instance is paused.
    /// </summary>
    public Func<Operation, bool>? FrozenInFlight { get; init; }
}

/// <summary>
/// Reads what really happened (the database, once leases have expired and been reaped) and holds
/// it against what every client was told (the history), invariant by invariant (DESIGN.md
/// "Invariants", issue 12).
/// </summary>
internal sealed class Checker(string connectionString, string schema, Timeouts timeouts, TimeSpan reapInterval)
{
    /// <summary>Slack on the client's and the database's clocks (one machine: only scheduling).</summary>
    private static readonly TimeSpan Epsilon = TimeSpan.FromMilliseconds(50);

    /// <summary>Beyond the HTTP timeout, what a loaded machine may add before the answer is read.</summary>
    private static readonly TimeSpan HttpSlack = TimeSpan.FromSeconds(2);

    private static readonly string WorkersSql = Sql.Load("workers.sql");
    private static readonly string AllocationsSql = Sql.Load("allocations.sql");
    private static readonly string OrphansSql = Sql.Load("active-orphans.sql");

    public async Task<CheckReport> CheckAsync(IReadOnlyList<Operation> history, IReadOnlyCollection<string> pools, Expectations expectations, CancellationToken cancellationToken)
    {
        var report = new CheckReport();
        var (rows, dbNow) = await WaitForLeasesAsync(pools, cancellationToken);
        var workers = await ReadWorkersAsync(pools, cancellationToken);
        var orphans = await ReadOrphansAsync(pools, cancellationToken);

        CheckCapacity(report, workers, orphans);
        CheckRepliesCommitted(report, history, rows);
        CheckOneAllocationPerKey(report, history, rows);
        CheckEligibility(report, history, rows);
        CheckFencing(report, history);
        CheckFreedOnce(report, history, rows);
        CheckNothingStuck(report, history, rows, dbNow);
        CheckHeldMeansHeld(report, history, rows);
        CheckFailureMeansNothing(report, history, rows);
        CheckNoCapacity(report, history, expectations);
        CheckHttpTimeout(report, history, expectations);
        CheckNo500(report, history);
        CheckOwnersStored(report, history, rows);
        report.Allocations = rows.Count;
        report.Workers = workers.Count;
        return report;
    }

    // --- reading ------------------------------------------------------------------------------

    /// <summary>
    /// Reads every allocation, waiting (bounded) until no active one has a lease that expired
    /// more than a reap interval ago: the reapers have had their chance.
    /// </summary>
    private async Task<(List<Row> Rows, DateTimeOffset DbNow)> WaitForLeasesAsync(IReadOnlyCollection<string> pools, CancellationToken cancellationToken)
    {
        var deadline = TimeProvider.System.GetUtcNow() + TimeSpan.FromSeconds(60);
        while (true)
        {
            var (rows, now) = await ReadAllocationsAsync(pools, cancellationToken);
            var pendingExpiry = rows.Where(r => r.Active && r.ExpiresAt is { } e && e > now - reapInterval - TimeSpan.FromSeconds(1)).ToList();
            if (pendingExpiry.Count == 0 || TimeProvider.System.GetUtcNow() > deadline)
            {
                return (rows, now);
            }

            var wait = pendingExpiry.Max(r => r.ExpiresAt!.Value) + reapInterval + TimeSpan.FromSeconds(1) - now;
            await Task.Delay(wait < TimeSpan.FromMilliseconds(200) ? TimeSpan.FromMilliseconds(200) : wait > TimeSpan.FromSeconds(10) ? TimeSpan.FromSeconds(10) : wait, cancellationToken);
        }
    }

    private async Task<(List<Row> Rows, DateTimeOffset DbNow)> ReadAllocationsAsync(IReadOnlyCollection<string> pools, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        DateTimeOffset now;
        await using (var clock = new NpgsqlCommand("SELECT now()", connection))
        await using (var read = await clock.ExecuteReaderAsync(cancellationToken))
        {
            await read.ReadAsync(cancellationToken);
            now = read.GetFieldValue<DateTimeOffset>(0);
        }

        await using var command = Command(AllocationsSql, connection, pools);
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        var rows = new List<Row>();
        while (await reader.ReadAsync(cancellationToken))
        {
            rows.Add(new Row(
                reader.GetGuid(0), reader.GetString(1), reader.GetString(2), reader.GetString(3), reader.GetInt32(4), reader.GetInt64(5),
                reader.GetFieldValue<DateTimeOffset>(6),
                reader.IsDBNull(7) ? null : reader.GetFieldValue<DateTimeOffset>(7),
                reader.IsDBNull(8) ? null : reader.GetFieldValue<DateTimeOffset>(8),
                reader.IsDBNull(9) ? null : reader.GetString(9),
                reader.GetBoolean(10),
                reader.IsDBNull(11) ? null : reader.GetString(11)));
        }

        return (rows, now);
    }

    private async Task<List<WorkerRow>> ReadWorkersAsync(IReadOnlyCollection<string> pools, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var command = Command(WorkersSql, connection, pools);
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        var workers = new List<WorkerRow>();
        while (await reader.ReadAsync(cancellationToken))
        {
            workers.Add(new WorkerRow(reader.GetString(0), reader.GetString(1), reader.GetInt32(2), reader.GetInt32(3), reader.GetString(4), reader.GetInt64(5), reader.GetInt32(6), reader.GetInt32(7)));
        }

        return workers;
    }

    private async Task<List<string>> ReadOrphansAsync(IReadOnlyCollection<string> pools, CancellationToken cancellationToken)
    {
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var command = Command(OrphansSql, connection, pools);
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        var orphans = new List<string>();
        while (await reader.ReadAsync(cancellationToken))
        {
            orphans.Add($"allocation {reader.GetGuid(0)} active on missing worker {reader.GetString(1)}/{reader.GetString(2)}");
        }

        return orphans;
    }

    private NpgsqlCommand Command(string sql, NpgsqlConnection connection, IReadOnlyCollection<string> pools)
    {
        var command = new NpgsqlCommand(sql.Replace("{schema}", Sql.Quote(schema), StringComparison.Ordinal), connection);
        command.Parameters.Add(new NpgsqlParameter("pools", NpgsqlDbType.Array | NpgsqlDbType.Text) { Value = pools.ToArray() });
        return command;
    }

    // --- the invariants -----------------------------------------------------------------------

    private static void CheckCapacity(CheckReport report, List<WorkerRow> workers, List<string> orphans)
    {
        var check = report.For(Invariant.Capacity);
        foreach (var w in workers)
        {
            check.Checked++;
            if (w.Load != w.ActiveUnits || w.Load < 0 || w.Load > w.Capacity)
            {
                check.Violation($"{w.Pool}/{w.Worker}: load {w.Load}, capacity {w.Capacity}, units of its {w.ActiveAllocations} active allocations {w.ActiveUnits}");
            }
        }

        foreach (var orphan in orphans)
        {
            check.Violation(orphan);
        }
    }

    private static void CheckRepliesCommitted(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.RepliesCommitted);
        var byId = rows.ToDictionary(r => r.AllocationId);
        foreach (var op in history.Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok, Allocation: not null }))
        {
            check.Checked++;
            var reply = op.Allocation!;
            if (!byId.TryGetValue(reply.AllocationId, out var row))
            {
                check.Violation($"{op}: answered allocation {reply.AllocationId} on {reply.WorkerId}, which has no committed row");
            }
            else if (row.WorkerId != reply.WorkerId || row.Units != reply.Units || row.SessionKey != op.Key || row.Pool != op.Pool || row.Owner != op.Tenant)
            {
                check.Violation($"{op}: answered {reply.AllocationId} on {reply.WorkerId} ({reply.Units} units) to tenant {op.Tenant} but the row is on {row.WorkerId} ({row.Units} units, key {row.SessionKey}, tenant {row.Owner})");
            }
        }
    }

    private static void CheckOneAllocationPerKey(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.OneAllocationPerKey);
        foreach (var key in rows.GroupBy(r => (r.Pool, r.Owner, r.SessionKey)))
        {
            check.Checked++;
            if (key.Count() > 1)
            {
                check.Violation($"key {key.Key.SessionKey} in {key.Key.Pool} has {key.Count()} allocations: {string.Join(", ", key.Select(r => $"{r.AllocationId} on {r.WorkerId} created {r.CreatedAt:HH:mm:ss.fff} {(r.Active ? "active" : r.EndReason)}"))}");
            }
        }

        foreach (var key in history.Where(o => o is { Kind: OperationKind.Allocate, Outcome: Outcome.Ok, Allocation: not null }).GroupBy(o => (o.Pool, o.Tenant, o.Key)))
        {
            var ids = key.Select(o => o.Allocation!.AllocationId).Distinct().ToList();
            if (ids.Count > 1)
            {
                check.Violation($"key {key.Key.Key} in {key.Key.Pool} was answered with {ids.Count} different allocations: {string.Join(", ", ids)}");
            }
        }
    }

    /// <summary>
    /// No allocation created (database time) after a drain or deregistration of its worker was
    /// confirmed and before anything could have made the worker eligible again. Intervals after
    /// an operation on that worker whose outcome is unknown are not judged (it may apply later).
    /// </summary>
    private static void CheckEligibility(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.EligibleWorkers);
        var stateOps = history.Where(o => o.Kind is OperationKind.Drain or OperationKind.Undrain or OperationKind.Deregister or OperationKind.Register or OperationKind.RegisterBatch)
            .GroupBy(o => (o.Pool, o.WorkerId));
        var allocations = rows.ToLookup(r => (r.Pool, (string?)r.WorkerId));
        foreach (var worker in stateOps)
        {
            var ops = worker.OrderBy(o => o.InvokedAt).ToList();
            for (var i = 0; i < ops.Count; i++)
            {
                var op = ops[i];
                if (op.Outcome != Outcome.Ok || op.Kind is not (OperationKind.Drain or OperationKind.Deregister))
                {
                    continue;
                }

                if (ops.Take(i).Any(o => o.Outcome != Outcome.Ok && o.Outcome != Outcome.Fail))
                {
                    continue; // an earlier call's outcome is unknown: it may still apply
                }

                // Ineligible from the confirmation until the next call that can make it eligible
                // again is sent (a drained worker stays drained through re-registration).
                var from = op.CompletedAt + Epsilon;
                var until = ops.Skip(i + 1)
                    .Where(o => op.Kind == OperationKind.Drain ? o.Kind is OperationKind.Undrain or OperationKind.Deregister : o.Kind is OperationKind.Register or OperationKind.RegisterBatch)
                    .Select(o => o.InvokedAt - Epsilon).DefaultIfEmpty(DateTimeOffset.MaxValue).Min();
                check.Checked++;
                foreach (var row in allocations[(worker.Key.Pool, worker.Key.WorkerId)].Where(r => r.CreatedAt > from && r.CreatedAt < until))
                {
                    check.Violation($"allocation {row.AllocationId} (key {row.SessionKey}) created {row.CreatedAt:HH:mm:ss.fff} on {row.WorkerId}, {(op.Kind == OperationKind.Drain ? "drained" : "deregistered")} at {op.CompletedAt:HH:mm:ss.fff} ({op})");
                }
            }
        }
    }

    /// <summary>A release, renew or load report carrying an epoch known to be superseded before it was sent must change nothing.</summary>
    private static void CheckFencing(CheckReport report, IReadOnlyList<Operation> history)
    {
        var check = report.For(Invariant.Fencing);
        var renewals = history.Where(o => o is { Kind: OperationKind.Renew, Outcome: Outcome.Ok, Allocation: not null }).ToLookup(o => o.AllocationId);
        var registrations = history.Where(o => o is { Kind: OperationKind.Register, Outcome: Outcome.Ok, WorkerEpoch: not null }).ToLookup(o => (o.Pool, o.WorkerId));
        foreach (var op in history.Where(o => o.Kind is OperationKind.Release or OperationKind.Renew or OperationKind.ReportLoad && o.Epoch is not null))
        {
            var newer = op.Kind == OperationKind.ReportLoad
                ? registrations[(op.Pool, op.WorkerId)].Where(r => r.CompletedAt < op.InvokedAt && r.WorkerEpoch > op.Epoch).Select(r => r.WorkerEpoch!.Value)
                : renewals[op.AllocationId].Where(r => r.CompletedAt < op.InvokedAt && r.Allocation!.Epoch > op.Epoch).Select(r => r.Allocation!.Epoch);
            var superseded = newer.DefaultIfEmpty(-1).Max();
            if (superseded < 0 && !op.KnownStale)
            {
                continue;
            }

            check.Checked++;
            if (op.Outcome == Outcome.Ok)
            {
                check.Violation($"{op}: accepted although epoch {(superseded > 0 ? superseded : "newer")} had been handed out before it was sent");
            }
        }
    }

    /// <summary>Each allocation ends once: one successful release at most, none after it ended otherwise, no renewal of an ended or expired lease.</summary>
    private static void CheckFreedOnce(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.FreedOnce);
        var byId = rows.ToDictionary(r => r.AllocationId);
        foreach (var allocation in history.Where(o => o is { Kind: OperationKind.Release, Outcome: Outcome.Ok }).GroupBy(o => o.AllocationId!.Value))
        {
            check.Checked++;
            if (allocation.Count() > 1)
            {
                check.Violation($"allocation {allocation.Key} released successfully {allocation.Count()} times: {string.Join("; ", allocation)}");
            }

            if (byId.TryGetValue(allocation.Key, out var row) && (row.Active || row.EndReason != "released"))
            {
                check.Violation($"allocation {allocation.Key} answered released but it is {(row.Active ? "still active" : $"ended as {row.EndReason} at {row.EndedAt:HH:mm:ss.fff}")}");
            }
        }

        // Renewals: the lease the client last heard of must not have run out before the renewal was sent.
        var replies = history.Where(o => o is { Outcome: Outcome.Ok, Allocation: not null } && o.Kind is OperationKind.Allocate or OperationKind.Renew)
            .ToLookup(o => o.Allocation!.AllocationId);
        foreach (var renew in history.Where(o => o is { Kind: OperationKind.Renew, Outcome: Outcome.Ok }))
        {
            check.Checked++;
            var known = replies[renew.AllocationId!.Value].Where(o => o.CompletedAt < renew.InvokedAt).MaxBy(o => o.CompletedAt);
            if (known?.Allocation?.ExpiresAt is { } expiry && renew.InvokedAt > expiry + Epsilon)
            {
                check.Violation($"{renew}: renewed a lease that expired at {expiry:HH:mm:ss.fff}, before it was sent ({renew.InvokedAt:HH:mm:ss.fff})");
            }

            if (byId.TryGetValue(renew.AllocationId.Value, out var row) && row.EndedAt is { } ended && renew.InvokedAt > ended + Epsilon)
            {
                check.Violation($"{renew}: renewed an allocation that ended ({row.EndReason}) at {ended:HH:mm:ss.fff}");
            }
        }
    }

    /// <summary>
    /// After the clients released what they held and the leases ran out: nothing active remains.
    /// An allocation still active is stuck: its slots are gone until someone finds it.
    /// </summary>
    private static void CheckNothingStuck(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows, DateTimeOffset dbNow)
    {
        var check = report.For(Invariant.NothingStuck);
        var byKey = history.Where(o => o.Kind == OperationKind.Allocate).ToLookup(o => (o.Pool, (string?)o.Tenant, o.Key));
        foreach (var row in rows)
        {
            check.Checked++;
            if (!row.Active)
            {
                continue;
            }

            var ops = byKey[(row.Pool, row.Owner, row.SessionKey)].ToList();
            var seen = ops.Count == 0 ? "no client asked for this key"
                : ops.All(o => o.Outcome == Outcome.Fail) ? "its caller saw only failure"
                : ops.Any(o => o.Outcome == Outcome.Ok) ? "its caller was answered and released (or gave up releasing)"
                : "its caller saw only unknown outcomes";
            check.Violation($"allocation {row.AllocationId} (key {row.SessionKey}, {row.Units} units on {row.WorkerId}) still active {(row.ExpiresAt is { } e ? $"{(dbNow - e).TotalSeconds:0.0} s after its lease expired" : "without a lease")}: {seen}");
        }
    }

    /// <summary>
    /// Invariant 11 (issue 20): an allocation answered active to a broker ends only by that
    /// broker's release, its lease's expiry or its worker's deregistration, never by the service's
    /// own clean-up of a call it took for abandoned. Read two ways: how each such row ended, and
    /// every broker release refused as "not active" (409 conflict) while the broker still held it.
    /// </summary>
    private static void CheckHeldMeansHeld(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.HeldMeansHeld);
        var answeredActive = history.Where(o => o is { Outcome: Outcome.Ok, Allocation.Active: true } && o.Kind is OperationKind.Allocate or OperationKind.Renew)
            .ToLookup(o => o.Allocation!.AllocationId);
        var releases = history.Where(o => o.Kind == OperationKind.Release).ToLookup(o => o.AllocationId);
        var deregistrations = history.Where(o => o.Kind == OperationKind.Deregister).ToLookup(o => (o.Pool, o.WorkerId));
        var byId = rows.ToDictionary(r => r.AllocationId);
        foreach (var row in rows.Where(r => !r.Active && answeredActive[r.AllocationId].Any()))
        {
            check.Checked++;
            var firstAnswer = answeredActive[row.AllocationId].MinBy(o => o.CompletedAt)!;
            var legitimate = row.EndReason switch
            {
                // A release the broker sent (it may have committed even if its answer was lost).
                "released" => releases[row.AllocationId].Any(o => o.Outcome != Outcome.Fail && o.InvokedAt <= row.EndedAt + Epsilon),
                "expired" => true, // the lease's own end (renewals and the row's expiry are checked by FreedOnce and Fencing)
                "worker-deregistered" => deregistrations[(row.Pool, row.WorkerId)].Any(o => o.InvokedAt <= row.EndedAt + Epsilon),
                _ => false,
            };
            if (!legitimate)
            {
                check.Violation($"allocation {row.AllocationId} (key {row.SessionKey}) was answered active ({firstAnswer}) and then ended as {row.EndReason} at {row.EndedAt:HH:mm:ss.fff}, which no broker release or deregistration explains");
            }
        }

        // A release refused as not active while the broker held the allocation: its lease (as last
        // answered) still ran, no earlier release of it may have committed, its worker was not
        // deregistered.
        foreach (var refused in history.Where(o => o is { Kind: OperationKind.Release, Problem: "conflict" }))
        {
            var id = refused.AllocationId!.Value;
            var lastAnswer = answeredActive[id].Where(o => o.CompletedAt <= refused.InvokedAt).MaxBy(o => o.CompletedAt);
            if (lastAnswer is null)
            {
                continue; // not a session this broker was answered active
            }

            check.Checked++;
            var earlierRelease = releases[id].Any(o => o.Id != refused.Id && o.InvokedAt < refused.InvokedAt && o.Outcome != Outcome.Fail);
            var leaseRan = lastAnswer.Allocation!.ExpiresAt is not { } expiry || expiry > refused.CompletedAt + Epsilon;
            var deregistered = byId.TryGetValue(id, out var row) && deregistrations[(row.Pool, row.WorkerId)].Any(o => o.InvokedAt <= refused.CompletedAt);
            if (!earlierRelease && leaseRan && !deregistered)
            {
                check.Violation($"{refused}: the broker's release of an allocation it held (answered active by {lastAnswer}) was refused as not active while its lease still ran");
            }
        }
    }

    /// <summary>
    /// An allocation must not have been created by a call that was answered "nothing was written"
    /// (409, 4xx, 503 unavailable), even one the service released itself afterwards: the caller was
    /// told nothing happened, and a retry with its key would then answer an ended allocation.
    /// </summary>
    private static void CheckFailureMeansNothing(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.FailureMeansNothing);
        var byKey = history.Where(o => o.Kind == OperationKind.Allocate).ToLookup(o => (o.Pool, (string?)o.Tenant, o.Key));
        foreach (var row in rows)
        {
            var ops = byKey[(row.Pool, row.Owner, row.SessionKey)].ToList();
            if (ops.Count == 0)
            {
                continue;
            }

            check.Checked++;
            // The calls that were in flight when the row's transaction began.
            var candidates = ops.Where(o => o.InvokedAt - Epsilon <= row.CreatedAt && (o.Outcome == Outcome.Pending || row.CreatedAt <= o.CompletedAt + Epsilon)).ToList();
            if (ops.All(o => o.Outcome == Outcome.Fail) || (candidates.Count > 0 && candidates.All(o => o.Outcome == Outcome.Fail)))
            {
                check.Violation($"allocation {row.AllocationId} (key {row.SessionKey}) created {row.CreatedAt:HH:mm:ss.fff} while the only calls in flight were answered as failures: {string.Join("; ", candidates.Count > 0 ? candidates : ops)}");
            }
        }
    }

    private static void CheckNoCapacity(CheckReport report, IReadOnlyList<Operation> history, Expectations expectations)
    {
        var check = report.For(Invariant.NoFalseNoCapacity);
        if (expectations.NoCapacityImpossible is null)
        {
            check.NotApplicable = true;
            return;
        }

        foreach (var op in history.Where(o => o.Kind == OperationKind.Allocate && o.Outcome != Outcome.Pending))
        {
            check.Checked++;
            if (op.Problem == "no-capacity" && expectations.NoCapacityImpossible(op))
            {
                check.Violation($"{op}: no capacity, although the scenario kept room for every caller");
            }
        }
    }

    private void CheckHttpTimeout(CheckReport report, IReadOnlyList<Operation> history, Expectations expectations)
    {
        var check = report.For(Invariant.HttpTimeout);
        foreach (var op in history.Where(o => o.Outcome != Outcome.Pending))
        {
            if (expectations.FrozenInFlight?.Invoke(op) == true)
            {
                continue; // the process that held it did not run: no answer was possible in time
            }

            var bound = timeouts.Request + (op.Kind == OperationKind.Allocate ? op.MaxWait : TimeSpan.Zero) + HttpSlack;
            if (op.ClientTimeout && op.Duration < bound)
            {
                continue; // the client gave up first, on purpose: nothing to judge
            }

            check.Checked++;
            if (op.Duration > bound)
            {
                check.Violation($"{op}: {(op.ClientTimeout ? "no answer" : "answered")} after {op.Duration.TotalSeconds:0.0} s (HTTP timeout {timeouts.Request.TotalSeconds:0} s{(op.MaxWait > TimeSpan.Zero ? $" + wait {op.MaxWait.TotalSeconds:0.#} s" : "")})");
            }
        }
    }

    private static void CheckNo500(CheckReport report, IReadOnlyList<Operation> history)
    {
        var check = report.For(Invariant.No500);
        foreach (var op in history.Where(o => o.Outcome != Outcome.Pending))
        {
            check.Checked++;
            if (op.Status == 500)
            {
                check.Violation($"{op}: {op.Detail}");
            }
        }
    }

    private static void CheckOwnersStored(CheckReport report, IReadOnlyList<Operation> history, List<Row> rows)
    {
        var check = report.For(Invariant.OwnersStored);
        var senders = history.Where(o => o is { Kind: OperationKind.Allocate, Key: not null })
            .GroupBy(o => (o.Pool, o.Key!))
            .ToDictionary(g => g.Key, g => g.Select(o => o.Tenant).ToHashSet(StringComparer.Ordinal));
        foreach (var row in rows)
        {
            check.Checked++;
            if (row.Owner is null)
            {
                check.Violation($"allocation {row.AllocationId} (key {row.SessionKey} in {row.Pool}, on {row.WorkerId}) is stored without an owner: any tenant sending that key would be answered it");
            }
            else if (senders.TryGetValue((row.Pool, row.SessionKey), out var tenants) && !tenants.Contains(row.Owner))
            {
                check.Violation($"allocation {row.AllocationId} (key {row.SessionKey} in {row.Pool}) is stored under tenant {row.Owner}, but only {string.Join(", ", tenants)} sent that key");
            }
        }
    }

    /// <param name="Owner">The tenant of the API key that made it (issue 22); null before owners existed.</param>
    private sealed record Row(Guid AllocationId, string Pool, string WorkerId, string SessionKey, int Units, long Epoch, DateTimeOffset CreatedAt, DateTimeOffset? ExpiresAt, DateTimeOffset? EndedAt, string? EndReason, bool Active, string? Owner);

    private sealed record WorkerRow(string Pool, string Worker, int Capacity, int Load, string State, long Epoch, int ActiveUnits, int ActiveAllocations);
}
