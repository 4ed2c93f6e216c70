-- One allocation by primary key, active (the hot table) or ended (the history, until purged);
-- the pool must match (ids are not shared across pools). An expired lease is over at its expiry,
-- whether or not the reaper has moved it yet (issue 20, #5). How it ended comes last (NULL while
-- active): a caller whose release may have run without its answer tells from it whether its
-- release ended it.
SELECT a.allocation_id, a.worker_id::text, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at,
       CASE WHEN a.expires_at <= now() THEN a.expires_at END AS ended_at,
       CASE WHEN a.expires_at <= now() THEN 'expired' END AS end_reason
  FROM {schema}.allocations a WHERE a.allocation_id = $2 AND (a.pool_id = $1) IS TRUE
UNION ALL
-- The history by id alone, the pool checked after (OFFSET 0 keeps the conditions apart): a pool
-- the statistics have not seen is estimated at one row, and the lookup then went through the
-- pool's prefix of the session index, reading every row the pool ever ended (issue 24).
-- The hot table's pool test likewise: "(pool_id = $1) IS TRUE", which no index serves, so that
-- statistics counting `allocations` empty cannot send the read through allocations_session.
SELECT h.allocation_id, h.worker_id::text, h.address, h.session_key, h.units, h.epoch, h.created_at, h.expires_at, h.ended_at, h.end_reason
  FROM (SELECT x.* FROM {schema}.allocation_history x WHERE x.allocation_id = $2 OFFSET 0) h WHERE h.pool_id = $1
LIMIT 1;
