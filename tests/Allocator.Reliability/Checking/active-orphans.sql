-- Active allocations on workers that no longer exist (their units are counted nowhere).
SELECT a.allocation_id, a.pool_id, a.worker_id
  FROM {schema}.allocations a
  LEFT JOIN {schema}.workers w ON w.pool_id = a.pool_id AND w.worker_id = a.worker_id
 WHERE a.pool_id = ANY (@pools) AND w.worker_id IS NULL;
