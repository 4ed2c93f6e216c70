-- One worker by primary key (pool_id, worker_id); no lock, a committed snapshot. Its load leaves
-- out the units of leases that have expired, reaped or not (issue 20, #5).
SELECT w.worker_id::text, w.address, w.capacity,
       w.load - coalesce((SELECT sum(a.units)::integer FROM {schema}.allocations a
                           WHERE a.worker_id = w.worker_id AND a.pool_id = w.pool_id AND a.expires_at <= now()), 0) AS load,
       w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
  FROM {schema}.workers w WHERE w.pool_id = $1 AND w.worker_id = $2;
