-- worker_id is COLLATE "C": ordinal order, as the in-memory store. Loads leave out the units of
-- leases that have expired, reaped or not (issue 20, #5).
WITH expired AS (
    SELECT a.worker_id, sum(a.units)::integer AS units
      FROM {schema}.allocations a
     WHERE a.expires_at <= now() AND a.pool_id = $1
     GROUP BY a.worker_id
)
SELECT w.worker_id::text, w.address, w.capacity, w.load - coalesce(x.units, 0) AS load,
       w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
  FROM {schema}.workers w
  LEFT JOIN expired x ON x.worker_id = w.worker_id
 WHERE w.pool_id = $1
 ORDER BY w.worker_id;
