-- The checker's view of the workers of the scenario's pools: capacity, load, state, epoch, and
-- the units of their active allocations (every row of allocations is active; ended ones are in
-- allocation_history). {schema} is replaced by the quoted schema name.
SELECT w.pool_id, w.worker_id, w.capacity, w.load, w.state, w.epoch,
       coalesce(a.units, 0)::int AS active_units, coalesce(a.allocations, 0)::int AS active_allocations
  FROM {schema}.workers w
  LEFT JOIN (SELECT pool_id, worker_id, sum(units) AS units, count(*) AS allocations
               FROM {schema}.allocations
              WHERE pool_id = ANY (@pools)
              GROUP BY pool_id, worker_id) a
         ON a.pool_id = w.pool_id AND a.worker_id = w.worker_id
 WHERE w.pool_id = ANY (@pools);
