-- One pool's settings; no row when it does not exist.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT p.strategy, p.default_lease_ms, p.max_wait_ms, p.heartbeat_timeout_ms, p.serialize_registrations, p.placement
FROM {schema}.pools AS p
WHERE p.pool_id = @pool_id;
