-- A pool's directory entry (no row: it lives in the default database). By primary key; callers
-- cache what they read and drop it on the pool's settings change.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT d.[database], d.moving_to
FROM {schema}.pool_directory AS d
WHERE d.pool_id = @pool_id;
