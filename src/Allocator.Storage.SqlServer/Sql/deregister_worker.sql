-- Deregisters a worker: ends its active allocations ('worker-deregistered') and deletes the row.
-- Result: found (bit), allocations_ended (int).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

DECLARE @found bit = 0;
DECLARE @ended int = 0;

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

-- Worker row first, as allocate does: an allocation cannot land on the worker between ending
-- its allocations and deleting it.
SELECT @found = 1
FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK)
WHERE w.pool_id = @pool_id AND w.worker_id = @worker_id;

IF @found = 1
BEGIN
    UPDATE {schema}.allocations
    SET ended_at = SYSUTCDATETIME(), end_reason = 'worker-deregistered'
    WHERE pool_id = @pool_id AND worker_id = @worker_id AND ended_at IS NULL;
    SET @ended = @@ROWCOUNT;

    DELETE FROM {schema}.workers WHERE pool_id = @pool_id AND worker_id = @worker_id;
END;

COMMIT TRANSACTION;

SELECT @found AS found, @ended AS allocations_ended;
