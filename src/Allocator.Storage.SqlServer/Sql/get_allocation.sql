-- One allocation (active or ended); no row when it does not exist in the pool. A lease that has
-- expired is over at its expiry, whether or not the reaper has run (issue 20, #5).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

SELECT a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at,
       COALESCE(a.ended_at, CASE WHEN a.expires_at <= SYSUTCDATETIME() THEN a.expires_at END) AS ended_at,
       -- How it ended (NULL while active): a caller whose release may have run without its answer
       -- tells from it whether its release ended it.
       CASE WHEN a.ended_at IS NOT NULL THEN a.end_reason WHEN a.expires_at <= SYSUTCDATETIME() THEN 'expired' END AS end_reason
FROM {schema}.allocations AS a
WHERE a.allocation_id = @allocation_id AND a.pool_id = @pool_id;
