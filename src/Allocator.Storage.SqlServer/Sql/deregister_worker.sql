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
DECLARE @id uniqueidentifier;
DECLARE @next_id uniqueidentifier;

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

-- Lock order (issue 20, #6): the worker's active allocation rows first, one seek each in
-- allocation_id order, as release, release_batch and the reaper take them (allocation, then
-- worker). Worker first, a release holding one of these allocations and waiting for the worker
-- row would deadlock with this script (PostgreSQL's deregister_worker had the same fix, #9).
WHILE 1 = 1
BEGIN
    SET @next_id = NULL;
    SELECT TOP (1) @next_id = a.allocation_id
    FROM {schema}.allocations AS a WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
    WHERE a.pool_id = @pool_id AND a.worker_id = @worker_id AND a.ended_at IS NULL
      AND (@id IS NULL OR a.allocation_id > @id)
    ORDER BY a.allocation_id;
    IF @next_id IS NULL
        BREAK;
    SET @id = @next_id;
END;

-- Then the worker row: setting it draining locks its clustered and eligible-index keys in one
-- statement (allocation passes over it from now on), and no allocation can land on it between
-- ending its allocations and deleting it (one that landed before this lock is ended below too).
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
