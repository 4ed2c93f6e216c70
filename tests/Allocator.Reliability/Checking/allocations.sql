-- Every allocation of the scenario's pools, active (allocations) or ended (allocation_history),
-- {schema} is replaced by the quoted schema name. session_key is the caller's key: the store keeps
-- an owned allocation's as "owner U+001F key" (issue 22), and the owner comes last.
SELECT allocation_id, pool_id, worker_id, substr(session_key, strpos(session_key, chr(31)) + 1) AS session_key, units, epoch, created_at, expires_at,
       NULL::timestamptz AS ended_at, NULL::text AS end_reason, true AS active,
       CASE WHEN strpos(session_key, chr(31)) > 0 THEN split_part(session_key, chr(31), 1) END AS owner
  FROM {schema}.allocations
 WHERE pool_id = ANY (@pools)
UNION ALL
SELECT allocation_id, pool_id, worker_id, substr(session_key, strpos(session_key, chr(31)) + 1), units, epoch, created_at, expires_at,
       ended_at, end_reason, false,
       CASE WHEN strpos(session_key, chr(31)) > 0 THEN split_part(session_key, chr(31), 1) END
  FROM {schema}.allocation_history
 WHERE pool_id = ANY (@pools);
