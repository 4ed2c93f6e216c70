-- Ends an allocation and frees its slots when @epoch is current (fencing). A lease that has expired
-- is over whether or not the reaper has run (issue 20, #5): status 2 (not active), and the row,
-- locked here anyway, is ended as the reaper would end it (at its expiry, 'expired'), whatever the
-- epoch, so its slots come back now and exactly once.
-- Result: status 0 ok, 1 not found, 2 not active, 3 stale epoch; then the allocation row, if any.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @status tinyint = 1;
DECLARE @worker_id nvarchar(128);
DECLARE @ended TABLE (units int NOT NULL, end_reason varchar(32) NOT NULL);
DECLARE @now datetime2(7) = SYSUTCDATETIME();

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

SELECT @worker_id = a.worker_id
FROM {schema}.allocations AS a
WHERE a.allocation_id = @allocation_id AND a.pool_id = @pool_id;

IF @worker_id IS NOT NULL
BEGIN
    -- The predicate is re-checked under the row's lock: a concurrent release or reaper that
    -- ended it first leaves nothing to end here, so a slot is never freed twice.
    -- Allocation row, then worker row. The worker is not pre-locked with a separate SELECT:
    -- allocation reads the eligible index first, and a clustered-only lock held across
    -- statements would invite the key-lookup deadlock (the UPDATE below takes both at once).
    UPDATE {schema}.allocations
    SET ended_at = CASE WHEN expires_at <= @now THEN expires_at ELSE @now END,
        end_reason = CASE WHEN expires_at <= @now THEN 'expired' ELSE 'released' END
    OUTPUT inserted.units, inserted.end_reason INTO @ended (units, end_reason)
    WHERE allocation_id = @allocation_id AND pool_id = @pool_id AND ended_at IS NULL
      AND (epoch = @epoch OR expires_at <= @now);

    IF EXISTS (SELECT 1 FROM @ended)
    BEGIN
        UPDATE {schema}.workers
        SET load_slots = load_slots - (SELECT e.units FROM @ended AS e)
        WHERE pool_id = @pool_id AND worker_id = @worker_id;
        UPDATE {schema}.pool_changes SET capacity_version = capacity_version + 1 WHERE pool_id = @pool_id;
        SET @status = CASE WHEN EXISTS (SELECT 1 FROM @ended AS e WHERE e.end_reason = 'released') THEN 0 ELSE 2 END;
    END
    ELSE
    BEGIN
        SELECT @status = CASE WHEN a.ended_at IS NOT NULL THEN 2 ELSE 3 END
        FROM {schema}.allocations AS a
        WHERE a.allocation_id = @allocation_id;
    END;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @status AS status;
SELECT a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at, a.ended_at
FROM {schema}.allocations AS a
WHERE a.allocation_id = @allocation_id AND a.pool_id = @pool_id;
