-- Change counters of every pool, polled (with backoff) to see other instances' releases,
-- registrations and undrains. No Service Broker WAITFOR: parked waiters inside SQL Server
-- contend on an instance-wide latch. A directory entry's version counts as a settings change of
-- its pool (issue 23): that is how a changed placement drops the routes other instances cache.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT u.pool_id, SUM(u.capacity_version) AS capacity_version, SUM(u.settings_version) AS settings_version
FROM (
    SELECT c.pool_id, c.capacity_version, c.settings_version FROM {schema}.pool_changes AS c
    UNION ALL
    SELECT d.pool_id, CAST(0 AS bigint), d.version FROM {schema}.pool_directory AS d
) AS u
GROUP BY u.pool_id;
