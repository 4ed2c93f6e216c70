-- Statistics snapshot (not a hot path): one scan of the pool's workers and active allocations.
SELECT p.strategy, p.default_lease_ms, p.max_wait_ms, p.heartbeat_timeout_ms, p.serialize_registrations,
       s.workers, s.available, s.capacity, s.load, s.free_slots, s.min_load, s.max_load, s.min_score, s.max_score,
       (SELECT count(*) FROM {schema}.allocations a WHERE a.pool_id = p.pool_id) AS active
  FROM {schema}.pools p
  CROSS JOIN LATERAL (
    SELECT count(*)::integer AS workers,
           count(*) FILTER (WHERE w.state = 'available')::integer AS available,
           coalesce(sum(w.capacity), 0)::bigint AS capacity,
           coalesce(sum(w.load), 0)::bigint AS load,
           coalesce(sum(w.capacity - w.load) FILTER (WHERE w.state = 'available'), 0)::bigint AS free_slots,
           coalesce(min(w.load) FILTER (WHERE w.state = 'available'), 0) AS min_load,
           coalesce(max(w.load) FILTER (WHERE w.state = 'available'), 0) AS max_load,
           coalesce(min(w.score) FILTER (WHERE w.state = 'available'), 0) AS min_score,
           coalesce(max(w.score) FILTER (WHERE w.state = 'available'), 0) AS max_score
      FROM {schema}.workers w WHERE w.pool_id = p.pool_id) s
 WHERE p.pool_id = $1;
