using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Audit;

/// <summary>
/// The invariant audit through <see cref="IWorkerStore"/> alone, for any store (the in-memory
/// one in particular). It assumes the run's pool was fresh, so that every allocation in it is
/// one the harness made and recorded in the <see cref="AllocationLedger"/>.
/// </summary>
internal static class StoreInvariantAudit
{
    public static async Task<AuditResult> AuditAsync(IWorkerStore store, string poolId, AllocationLedger ledger, CancellationToken cancellationToken)
    {
        var violations = new List<AuditViolation>();
        var workers = await store.GetWorkersAsync(poolId, cancellationToken);
        var statistics = await store.GetPoolStatisticsAsync(poolId, cancellationToken);

        // Every successful reply has its row, with the worker and units the caller was told.
        var activeUnits = new Dictionary<string, long>(StringComparer.Ordinal);
        var activeBySession = new Dictionary<string, Guid>(StringComparer.Ordinal);
        var active = 0L;
        var replies = ledger.Replies.DistinctBy(a => a.AllocationId).ToList();
        foreach (var reply in replies)
        {
            var row = await store.GetAllocationAsync(poolId, reply.AllocationId, cancellationToken);
            if (row is null)
            {
                violations.Add(new AuditViolation("reply-without-row", poolId, reply.WorkerId, $"allocation {reply.AllocationId} was answered but has no row"));
                continue;
            }

            if (row.WorkerId != reply.WorkerId || row.Units != reply.Units || row.SessionKey != reply.SessionKey)
            {
                violations.Add(new AuditViolation("reply-differs-from-row", poolId, row.WorkerId, $"allocation {reply.AllocationId}: reply said {reply.WorkerId}/{reply.Units}/{reply.SessionKey}, row says {row.WorkerId}/{row.Units}/{row.SessionKey}"));
            }

            if (row.IsActive)
            {
                active++;
                activeUnits[row.WorkerId] = activeUnits.GetValueOrDefault(row.WorkerId) + row.Units;
                if (activeBySession.TryGetValue(row.SessionKey, out var other))
                {
                    violations.Add(new AuditViolation("duplicate-active-session", poolId, row.WorkerId, $"session {row.SessionKey} has active allocations {other} and {row.AllocationId}"));
                }
                else
                {
                    activeBySession[row.SessionKey] = row.AllocationId;
                }
            }
            else if (!ledger.WasReleased(row.AllocationId) && row.ExpiresAt is null)
            {
                violations.Add(new AuditViolation("ended-without-release", poolId, row.WorkerId, $"allocation {row.AllocationId} ended though the run never released it"));
            }
        }

        // Load equals the units of the worker's active allocations, within capacity.
        foreach (var worker in workers)
        {
            if (worker.Load < 0 || worker.Load > worker.Capacity)
            {
                violations.Add(new AuditViolation("load-out-of-range", poolId, worker.WorkerId, $"load {worker.Load}, capacity {worker.Capacity}"));
            }

            var units = activeUnits.GetValueOrDefault(worker.WorkerId);
            if (worker.Load != units)
            {
                violations.Add(new AuditViolation("load-mismatch", poolId, worker.WorkerId, $"load {worker.Load}, units of active allocations {units}"));
            }
        }

        var known = workers.Select(w => w.WorkerId).ToHashSet(StringComparer.Ordinal);
        foreach (var orphan in activeUnits.Keys.Where(w => !known.Contains(w)))
        {
            violations.Add(new AuditViolation("active-allocation-without-worker", poolId, orphan, $"{activeUnits[orphan]} active units on a worker that does not exist"));
        }

        if (statistics.ActiveAllocations != active)
        {
            violations.Add(new AuditViolation("untracked-allocations", poolId, null, $"the pool has {statistics.ActiveAllocations} active allocations, the run holds {active}"));
        }

        return new AuditResult(
            $"{store.Name} pool {poolId}",
            [
                $"{replies.Count:N0} successful replies each have their row with the same worker, units and session",
                $"{workers.Count:N0} workers: 0 <= load <= capacity and load = units of active allocations ({active:N0} active)",
                "no session key with two active allocations",
                "active allocations in the pool = active allocations the run holds",
            ],
            violations);
    }
}
