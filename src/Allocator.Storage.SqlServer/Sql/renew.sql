-- Extends a lease from now (database time) and advances the fencing epoch, when @epoch is current.
-- @lease_ms NULL takes the pool's default lease (NULL there too: no expiry).
-- Result: status 0 ok, 1 not found, 2 not active, 3 stale epoch; then the allocation row, if any.
-- @owner (issue 22): the principal renewing, NULL for anyone. Another owner's allocation is answered
-- exactly as a missing one (1, no row). An owner is the part of session_key before the first
-- U+001F; a key without one has no owner, and anyone may renew it.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @status tinyint = 1;
DECLARE @effective_ms bigint;
DECLARE @new_epoch bigint;
DECLARE @now datetime2(7) = SYSUTCDATETIME();
DECLARE @pool_found bit = 0;

BEGIN TRANSACTION;

SELECT @pool_found = 1, @effective_ms = COALESCE(@lease_ms, p.default_lease_ms)
FROM {schema}.pools AS p
WHERE p.pool_id = @pool_id;
IF @pool_found = 0
    THROW 50404, N'Pool not found.', 1;

DECLARE @visible bit = CASE WHEN @owner IS NULL OR NOT EXISTS
(
    SELECT 1 FROM {schema}.allocations AS o
    WHERE o.allocation_id = @allocation_id AND o.pool_id = @pool_id
      AND CHARINDEX(NCHAR(31), o.session_key) > 0
      AND LEFT(o.session_key, CHARINDEX(NCHAR(31), o.session_key) - 1) <> @owner
) THEN 1 ELSE 0 END;

SET @new_epoch = NEXT VALUE FOR {schema}.epochs;

UPDATE {schema}.allocations
SET epoch = @new_epoch,
    expires_at = CASE WHEN @effective_ms IS NULL THEN NULL
                      ELSE DATEADD(millisecond, CAST(@effective_ms % 1000 AS int), DATEADD(second, CAST(@effective_ms / 1000 AS int), @now)) END
WHERE allocation_id = @allocation_id AND pool_id = @pool_id AND ended_at IS NULL AND epoch = @epoch AND @visible = 1
  -- Expired is expired at this statement, whether or not the reaper has run (#5).
  AND (expires_at IS NULL OR expires_at > @now);

IF @@ROWCOUNT = 1
    SET @status = 0;
ELSE
    SELECT @status = CASE WHEN a.ended_at IS NOT NULL OR a.expires_at <= @now THEN 2 ELSE 3 END
    FROM {schema}.allocations AS a
    WHERE a.allocation_id = @allocation_id AND a.pool_id = @pool_id AND @visible = 1;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @status AS status;
-- An expired lease reads as ended at its expiry, reaped or not (issue 20, #5).
SELECT a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at,
       COALESCE(a.ended_at, CASE WHEN a.expires_at <= SYSUTCDATETIME() THEN a.expires_at END) AS ended_at
FROM {schema}.allocations AS a
WHERE a.allocation_id = @allocation_id AND a.pool_id = @pool_id AND @visible = 1;
