-- Deletes a worker and ends its active allocations ('worker-deregistered'); the allocation rows
-- stay as history (no FK to workers). The worker row is locked first (DELETE), the same order
-- allocation uses (worker, then allocation insert); a release racing on one of its allocations
-- may deadlock with this and is retried by the caller on 40P01.
WITH gone AS (
    DELETE FROM {schema}.workers w
     WHERE w.pool_id = $1 AND w.worker_id = $2
    RETURNING w.pool_id, w.worker_id
), ended AS (
    UPDATE {schema}.allocations a SET ended_at = now(), end_reason = 'worker-deregistered'
      FROM gone g
     WHERE a.pool_id = g.pool_id AND a.worker_id = g.worker_id AND a.ended_at IS NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::integer AS found, (SELECT count(*) FROM ended)::integer AS ended;
