-- One allocation by primary key; the pool must match (ids are not shared across pools).
SELECT a.allocation_id, a.worker_id::text, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at, a.ended_at
  FROM {schema}.allocations a WHERE a.allocation_id = $2 AND a.pool_id = $1;
