-- Deregisters a worker: ends its active allocations ('worker-deregistered') and deletes the row.
-- Result: found (bit), allocations_ended (int).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @found bit = 0;
DECLARE @ended int = 0;

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

-- Worker row first, as allocate does: setting it draining locks its clustered and eligible-index
-- keys in one statement (allocation passes over it from now on), and no allocation can land on
-- it between ending its allocations and deleting it.
UPDATE {schema}.workers SET state = 1 WHERE pool_id = @pool_id AND worker_id = @worker_id;
IF @@ROWCOUNT = 1
    SET @found = 1;

IF @found = 1
BEGIN
    -- A lease that had expired ended then, before the worker left (issue 20, #5).
    UPDATE {schema}.allocations
    SET ended_at = CASE WHEN expires_at <= SYSUTCDATETIME() THEN expires_at ELSE SYSUTCDATETIME() END,
        end_reason = CASE WHEN expires_at <= SYSUTCDATETIME() THEN 'expired' ELSE 'worker-deregistered' END
    WHERE pool_id = @pool_id AND worker_id = @worker_id AND ended_at IS NULL;
    SET @ended = @@ROWCOUNT;

    -- The epoch outlives the row: a later registration of this id continues from it (#4).
    -- UPDATE, then INSERT (no MERGE, as registration); the worker row, locked above, serializes
    -- deregistrations of one id.
    DECLARE @last_epoch bigint = (SELECT w.epoch FROM {schema}.workers AS w WHERE w.pool_id = @pool_id AND w.worker_id = @worker_id);
    UPDATE {schema}.worker_epochs
    SET epoch = CASE WHEN @last_epoch > epoch THEN @last_epoch ELSE epoch END
    WHERE pool_id = @pool_id AND worker_id = @worker_id;
    IF @@ROWCOUNT = 0
        INSERT INTO {schema}.worker_epochs (pool_id, worker_id, epoch) VALUES (@pool_id, @worker_id, @last_epoch);

    DELETE FROM {schema}.workers WHERE pool_id = @pool_id AND worker_id = @worker_id;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @found AS found, @ended AS allocations_ended;
