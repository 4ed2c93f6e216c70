-- The last step of a move: delete the pool from this, its old, database, only if it has no
-- worker and no active allocation. The pool row is locked (UPDLOCK, HOLDLOCK) before the counts;
-- a worker inserted after them still cannot survive the pool: workers reference pools without
-- ON DELETE CASCADE, so the DELETE of the pool row then fails (547) and XACT_ABORT rolls the
-- whole removal back. SQL Server keeps ended allocations in the allocations table, whose foreign
-- key to pools makes them go with the pool (PostgreSQL keeps them in its history until the
-- retention ends; docs/sqlserver.md). Result: found, removed, workers, active allocations.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @found bit = 0;
DECLARE @removed bit = 0;
DECLARE @workers int = 0;
DECLARE @active bigint = 0;

BEGIN TRANSACTION;

IF EXISTS (SELECT 1 FROM {schema}.pools AS p WITH (UPDLOCK, HOLDLOCK, ROWLOCK) WHERE p.pool_id = @pool_id)
BEGIN
    SET @found = 1;
    SELECT @workers = COUNT(*) FROM {schema}.workers AS w WHERE w.pool_id = @pool_id;
    SELECT @active = COUNT_BIG(*) FROM {schema}.allocations AS a WHERE a.pool_id = @pool_id AND a.ended_at IS NULL;
    IF @workers = 0 AND @active = 0
    BEGIN
        DELETE FROM {schema}.worker_epochs WHERE pool_id = @pool_id;
        DELETE FROM {schema}.allocations WHERE pool_id = @pool_id;
        DELETE FROM {schema}.pool_changes WHERE pool_id = @pool_id;
        DELETE FROM {schema}.pools WHERE pool_id = @pool_id;
        SET @removed = 1;
    END;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @found AS found, @removed AS removed, @workers AS workers, @active AS active;
