-- Ends an allocation if $3 is its current epoch: moves it from the hot table to the history
-- ('released'), frees its units and notifies waiters. FOR UPDATE on the allocation row
-- serializes release/renew/reap of one allocation, so the units are freed exactly once. The
-- worker row may be gone (deregistered): nothing to free then. No row: not active (the caller
-- then reads the history) or not found.
-- A lease that has expired is over whether or not the reaper has run (issue 20, #5): the caller
-- hears 'not active', and the row, locked here anyway, is ended as the reaper would end it (at
-- its expiry, 'expired'), whatever the epoch: its units come back now, and a reaper racing this
-- statement skips the locked row instead of ending it a second time.
-- Every read of `allocations` names the id ($2), and the pool test is written "(pool_id = $1) IS
-- TRUE", which no index serves: planned by statistics that counted the table empty (taken when
-- every allocation had ended, its pages still there), `allocations` is estimated at one row, and
-- the pool's prefix of allocations_session, or a whole read of the primary key joined to the
-- locked row, looked as cheap as the id's entry: each call read every active allocation
-- (issue 24, ExplainTests).
WITH target AS (
    SELECT a.* FROM {schema}.allocations a
     WHERE a.allocation_id = $2 AND (a.pool_id = $1) IS TRUE
       FOR UPDATE
), ended AS (
    DELETE FROM {schema}.allocations a
     USING target t
     WHERE a.allocation_id = $2 AND a.allocation_id = t.allocation_id AND (t.epoch = $3 OR t.expires_at <= now())
    RETURNING a.*, coalesce(a.expires_at <= now(), false) AS lapsed
), history AS (
    INSERT INTO {schema}.allocation_history
    SELECT e.allocation_id, e.pool_id, e.worker_id, e.address, e.session_key, e.units, e.epoch,
           e.created_at, e.expires_at,
           CASE WHEN e.lapsed THEN e.expires_at ELSE now() END,
           CASE WHEN e.lapsed THEN 'expired' ELSE 'released' END
      FROM ended e
    RETURNING allocation_id, ended_at, end_reason
), freed AS (
    UPDATE {schema}.workers w SET load = w.load - e.units
      FROM ended e
     WHERE w.pool_id = e.pool_id AND w.worker_id = e.worker_id
    RETURNING 1
), notified AS (
    -- Only freed units notify (one pg_notify, delivered at commit).
    SELECT pg_notify($4, $1 || ':c') FROM ended
)
SELECT t.allocation_id, t.worker_id::text, t.address, t.session_key, t.units, t.epoch,
       t.created_at, t.expires_at, h.ended_at,
       (h.end_reason = 'released') IS TRUE AS changed,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM notified) AS _n
  FROM target t LEFT JOIN history h ON h.allocation_id = t.allocation_id;
