-- Pool settings by primary key; no lock (a read of committed settings; callers cache it briefly).
SELECT strategy, default_lease_ms, max_wait_ms, heartbeat_timeout_ms, serialize_registrations, placement
  FROM {schema}.pools WHERE pool_id = $1;
