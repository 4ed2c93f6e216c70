-- The allocation a session key holds in a pool, as allocate_skip_locked.sql would answer the
-- key: the active one, else the latest that ended within the retention (@retention_ms); no row
-- when there is none. @session_key is the stored key (the owner in front). A lease that has
-- expired is over at its expiry, whether or not the reaper has run (issue 20, #5). A request
-- naming several pools reads this in each before it allocates anywhere (ADR 0036).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

DECLARE @now datetime2(7) = SYSUTCDATETIME();
DECLARE @history_after datetime2(7) =
    DATEADD(millisecond, -CAST(@retention_ms % 1000 AS int), DATEADD(second, -CAST(@retention_ms / 1000 AS int), @now));

SELECT TOP (1) a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at,
       COALESCE(a.ended_at, CASE WHEN a.expires_at <= @now THEN a.expires_at END) AS ended_at,
       CASE WHEN a.ended_at IS NOT NULL THEN a.end_reason WHEN a.expires_at <= @now THEN 'expired' END AS end_reason
FROM {schema}.allocations AS a
WHERE a.pool_id = @pool_id AND a.session_key = @session_key
  AND (a.ended_at IS NULL OR a.ended_at > @history_after)
ORDER BY CASE WHEN a.ended_at IS NULL THEN 0 ELSE 1 END, a.ended_at DESC;
