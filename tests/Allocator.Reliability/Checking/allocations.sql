-- Every allocation of the scenario's pools, active (allocations) or ended (allocation_history),
-- {schema} is replaced by the quoted schema name.
SELECT allocation_id, pool_id, worker_id, session_key, units, epoch, created_at, expires_at,
       NULL::timestamptz AS ended_at, NULL::text AS end_reason, true AS active
  FROM {schema}.allocations
 WHERE pool_id = ANY (@pools)
UNION ALL
SELECT allocation_id, pool_id, worker_id, session_key, units, epoch, created_at, expires_at,
       ended_at, end_reason, false
  FROM {schema}.allocation_history
 WHERE pool_id = ANY (@pools);
