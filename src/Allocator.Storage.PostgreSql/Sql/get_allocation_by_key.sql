-- The allocation a session key holds in a pool, as allocate_batch would answer the key: the
-- active one, else the latest that ended within the retention ($3 ms); its columns NULL when
-- there is none. $2 is the stored key (the owner in front). A lease that has expired is over at
-- its expiry, whether or not the reaper has moved it yet (issue 20, #5). A request naming several
-- pools reads this in each before it allocates anywhere (ADR 0036), so it is one round trip: the
-- last column says whether the pool exists (a key never used is the common answer, and telling
-- it from a missing pool took a second read). The columns read like get_allocation.sql's.
SELECT k.allocation_id, k.worker_id, k.address, k.session_key, k.units, k.epoch, k.created_at, k.expires_at,
       k.ended_at, k.end_reason,
       EXISTS (SELECT 1 FROM {schema}.pools p WHERE p.pool_id = $1) AS pool_found
  FROM (SELECT 1) one
  LEFT JOIN LATERAL (
    SELECT a.allocation_id, a.worker_id::text AS worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at,
           CASE WHEN a.expires_at <= now() THEN a.expires_at END AS ended_at,
           CASE WHEN a.expires_at <= now() THEN 'expired' END AS end_reason,
           0 AS pass
      FROM {schema}.allocations a WHERE a.pool_id = $1 AND a.session_key = $2
    UNION ALL
    -- The key's rows through allocation_history_session_c (byte-wise, fenced with OFFSET 0 as in
    -- allocate_batch: a planner that estimates the history at one row must not read by ended_at).
    SELECT h.allocation_id, h.worker_id::text, h.address, h.session_key, h.units, h.epoch, h.created_at, h.expires_at,
           h.ended_at, h.end_reason, 1
      FROM (SELECT x.* FROM {schema}.allocation_history x WHERE x.pool_id = $1 AND x.session_key = $2 COLLATE "C" OFFSET 0) h
     WHERE h.ended_at > now() - $3 * interval '1 millisecond'
    ORDER BY pass, ended_at DESC
    LIMIT 1
  ) k ON true;
