-- Ends an allocation if $3 is its current epoch, frees its units and notifies waiters.
-- FOR UPDATE on the allocation row serializes release/renew/reap of one allocation, so the
-- units are freed exactly once. The worker row may be gone (deregistered): nothing to free then.
WITH target AS (
    SELECT a.* FROM {schema}.allocations a
     WHERE a.allocation_id = $2 AND a.pool_id = $1
       FOR UPDATE
), ended AS (
    UPDATE {schema}.allocations a SET ended_at = now(), end_reason = 'released'
      FROM target t
     WHERE a.allocation_id = t.allocation_id AND t.ended_at IS NULL AND t.epoch = $3
    RETURNING a.*
), freed AS (
    UPDATE {schema}.workers w SET load = w.load - e.units
      FROM ended e
     WHERE w.pool_id = e.pool_id AND w.worker_id = e.worker_id
    RETURNING 1
)
, notified AS (
    -- Only a successful release notifies (one pg_notify, delivered at commit).
    SELECT pg_notify($4, $1 || ':c') FROM ended
)
SELECT t.allocation_id, t.worker_id::text, t.address, t.session_key, t.units,
       coalesce(e.epoch, t.epoch) AS epoch, t.created_at, t.expires_at, coalesce(e.ended_at, t.ended_at) AS ended_at,
       (e.allocation_id IS NOT NULL) AS changed,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM notified) AS _n
  FROM target t LEFT JOIN ended e ON e.allocation_id = t.allocation_id;
