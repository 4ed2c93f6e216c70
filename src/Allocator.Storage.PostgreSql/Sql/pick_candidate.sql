-- The per-request selection that allocate_batch runs (skip-locked variant), kept as a file so
-- tests can EXPLAIN exactly this shape: an index seek on workers_pick (pool_id, score,
-- worker_id) WHERE state = 'available', read in order, first unlocked row with room wins.
-- Keep in step with Functions/allocate_batch.sql.
SELECT w.worker_id, w.address, w.score FROM {schema}.workers w
 WHERE w.pool_id = $1 AND w.state = 'available' AND w.last_heartbeat >= $2
   AND w.capacity - w.load >= $3 AND w.tags @> $4::text[]
 ORDER BY w.score, w.worker_id
 LIMIT 1
 FOR NO KEY UPDATE SKIP LOCKED;
