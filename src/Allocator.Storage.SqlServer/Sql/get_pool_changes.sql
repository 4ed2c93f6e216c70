-- Change counters of every pool, polled (with backoff) to see other instances' releases,
-- registrations and undrains. No Service Broker WAITFOR: parked waiters inside SQL Server
-- contend on an instance-wide latch.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT c.pool_id, c.capacity_version, c.settings_version
FROM {schema}.pool_changes AS c;
