-- Statistics snapshot (not a hot path): one scan of the pool's workers and active allocations.
-- An expired lease holds nothing, whether or not the reaper has run (issue 20, #5): neither it
-- nor its units count, as allocate (which ends the pool's expired leases before answering no
-- capacity) sees them. Found through allocations_expiry: few rows, the reaper keeps it short.
WITH expired AS (
    SELECT a.worker_id, sum(a.units)::integer AS units
      FROM {schema}.allocations a
     WHERE a.expires_at <= now() AND a.pool_id = $1
     GROUP BY a.worker_id
), w AS (
    SELECT w.state, w.capacity, w.load - coalesce(x.units, 0) AS load,
           CASE WHEN x.units IS NULL THEN w.score
                ELSE greatest((w.load - x.units)::bigint * 1000000000000 / w.capacity,
                              coalesce(w.reported_load_index, 0)::bigint * 100000000) END AS score
      FROM {schema}.workers w
      LEFT JOIN expired x ON x.worker_id = w.worker_id
     WHERE w.pool_id = $1
)
SELECT p.strategy, p.default_lease_ms, p.max_wait_ms, p.heartbeat_timeout_ms, p.serialize_registrations,
       s.workers, s.available, s.capacity, s.load, s.free_slots, s.min_load, s.max_load, s.min_score, s.max_score,
       (SELECT count(*) FROM {schema}.allocations a
         WHERE a.pool_id = p.pool_id AND (a.expires_at IS NULL OR a.expires_at > now())) AS active,
       p.placement
  FROM {schema}.pools p
  CROSS JOIN (
    SELECT count(*)::integer AS workers,
           count(*) FILTER (WHERE w.state = 'available')::integer AS available,
           coalesce(sum(w.capacity), 0)::bigint AS capacity,
           coalesce(sum(w.load), 0)::bigint AS load,
           coalesce(sum(w.capacity - w.load) FILTER (WHERE w.state = 'available'), 0)::bigint AS free_slots,
           coalesce(min(w.load) FILTER (WHERE w.state = 'available'), 0) AS min_load,
           coalesce(max(w.load) FILTER (WHERE w.state = 'available'), 0) AS max_load,
           coalesce(min(w.score) FILTER (WHERE w.state = 'available'), 0) AS min_score,
           coalesce(max(w.score) FILTER (WHERE w.state = 'available'), 0) AS max_score
      FROM w) s
 WHERE p.pool_id = $1;
