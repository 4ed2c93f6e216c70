-- Ends an allocation if $3 is its current epoch: moves it from the hot table to the history
-- ('released'), frees its units and notifies waiters. FOR UPDATE on the allocation row
-- serializes release/renew/reap of one allocation, so the units are freed exactly once. The
-- worker row may be gone (deregistered): nothing to free then. No row: not active (the caller
-- then reads the history) or not found.
WITH target AS (
    SELECT a.* FROM {schema}.allocations a
     WHERE a.allocation_id = $2 AND a.pool_id = $1
       FOR UPDATE
), ended AS (
    DELETE FROM {schema}.allocations a
     USING target t
     WHERE a.allocation_id = t.allocation_id AND t.epoch = $3
    RETURNING a.*
), history AS (
    INSERT INTO {schema}.allocation_history
    SELECT e.allocation_id, e.pool_id, e.worker_id, e.address, e.session_key, e.units, e.epoch,
           e.created_at, e.expires_at, now(), 'released'
      FROM ended e
    RETURNING allocation_id, ended_at
), freed AS (
    UPDATE {schema}.workers w SET load = w.load - e.units
      FROM ended e
     WHERE w.pool_id = e.pool_id AND w.worker_id = e.worker_id
    RETURNING 1
), notified AS (
    -- Only a successful release notifies (one pg_notify, delivered at commit).
    SELECT pg_notify($4, $1 || ':c') FROM ended
)
SELECT t.allocation_id, t.worker_id::text, t.address, t.session_key, t.units, t.epoch,
       t.created_at, t.expires_at, h.ended_at,
       (h.allocation_id IS NOT NULL) AS changed,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM notified) AS _n
  FROM target t LEFT JOIN history h ON h.allocation_id = t.allocation_id;
