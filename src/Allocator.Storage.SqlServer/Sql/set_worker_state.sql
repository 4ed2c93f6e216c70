-- Drain (1), undrain (0) or take offline (2). Result: status 0 ok, 1 not found.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @status tinyint = 1;

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

UPDATE {schema}.workers SET state = @state WHERE pool_id = @pool_id AND worker_id = @worker_id;
IF @@ROWCOUNT = 1
BEGIN
    SET @status = 0;
    -- An undrain makes slots eligible again: wake waiters on other instances.
    IF @state = 0
        UPDATE {schema}.pool_changes SET capacity_version = capacity_version + 1 WHERE pool_id = @pool_id;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @status AS status;
