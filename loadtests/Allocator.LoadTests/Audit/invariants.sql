-- Invariant audit of one Allocator schema, run after every load storm. Each row is a violation;
-- an empty answer means the store kept its invariants. {schema} is replaced by the quoted schema
-- name (identifiers cannot be parameters); @pool_id (nullable text) narrows the audit to a pool.
-- Reads only; run it outside the proxy so it costs no injected latency.

-- Load must equal the units of the worker's active allocations (every row of the allocations
-- table is active; ended ones are in allocation_history).
SELECT 'load-mismatch' AS check_name, w.pool_id, w.worker_id,
       format('load %s, units of active allocations %s', w.load, coalesce(a.units, 0)) AS detail
FROM {schema}.workers AS w
LEFT JOIN (
    SELECT pool_id, worker_id, sum(units) AS units
    FROM {schema}.allocations
    GROUP BY pool_id, worker_id
) AS a ON a.pool_id = w.pool_id AND a.worker_id = w.worker_id
WHERE w.load <> coalesce(a.units, 0)
  AND (@pool_id::text IS NULL OR w.pool_id = @pool_id::text)

UNION ALL

-- 0 <= load <= capacity (the CHECK constraints should make this impossible; the audit trusts nothing).
SELECT 'load-out-of-range', pool_id, worker_id, format('load %s, capacity %s', load, capacity)
FROM {schema}.workers
WHERE (load < 0 OR load > capacity)
  AND (@pool_id::text IS NULL OR pool_id = @pool_id::text)

UNION ALL

-- At most one active allocation per (pool, session key): idempotency held under the storm.
SELECT 'duplicate-active-session', pool_id, NULL,
       format('session %s has %s active allocations', session_key, count(*))
FROM {schema}.allocations
WHERE (@pool_id::text IS NULL OR pool_id = @pool_id::text)
GROUP BY pool_id, session_key
HAVING count(*) > 1

UNION ALL

-- An active allocation must sit on a worker that exists (its units are counted nowhere otherwise).
SELECT 'active-allocation-without-worker', a.pool_id, a.worker_id,
       format('allocation %s (%s units) is active on a missing worker', a.allocation_id, a.units)
FROM {schema}.allocations AS a
LEFT JOIN {schema}.workers AS w ON w.pool_id = a.pool_id AND w.worker_id = a.worker_id
WHERE w.worker_id IS NULL
  AND (@pool_id::text IS NULL OR a.pool_id = @pool_id::text)

ORDER BY 1, 2, 3
LIMIT 1000;
