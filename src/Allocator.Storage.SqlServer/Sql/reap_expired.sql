-- Ends up to @max_count expired leases (database clock) and frees their slots, then forgets up
-- to @purge_count allocations that ended more than @retention_ms ago (HistoryRetention).
-- Result: the allocations this call ended.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @ended TABLE
(
    allocation_id uniqueidentifier NOT NULL PRIMARY KEY,
    pool_id       nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    worker_id     nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    units         int NOT NULL
);
DECLARE @freed TABLE
(
    pool_id   nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    units     int NOT NULL,
    PRIMARY KEY (pool_id, worker_id)
);
DECLARE @pool nvarchar(128);
DECLARE @worker nvarchar(128);
DECLARE @next_pool nvarchar(128);
DECLARE @next_worker nvarchar(128);
DECLARE @units int;

BEGIN TRANSACTION;

-- READPAST: an allocation another reaper (or a release) holds is passed over, so concurrent
-- reapers split the work and never end, or free the slots of, one allocation twice; UPDLOCK
-- and ROWLOCK keep each claimed row ours until commit; READCOMMITTEDLOCK keeps the read locking
-- under read-committed snapshot. ix_allocations_expiry makes the ORDER BY a seek.
WITH expired AS
(
    SELECT TOP (@max_count) a.allocation_id, a.pool_id, a.worker_id, a.units, a.expires_at, a.ended_at, a.end_reason
    FROM {schema}.allocations AS a WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE a.ended_at IS NULL AND a.expires_at IS NOT NULL AND a.expires_at <= SYSUTCDATETIME()
      -- @pool_id NULL: every pool (the reaper); else one pool (an allocation that found no capacity, #5).
      AND (@pool_id IS NULL OR a.pool_id = @pool_id)
    ORDER BY a.expires_at
)
-- Ended at its expiry, as every read answered it since (issue 20, #5).
UPDATE expired
SET ended_at = expires_at, end_reason = 'expired'
OUTPUT inserted.allocation_id, inserted.pool_id, inserted.worker_id, inserted.units INTO @ended (allocation_id, pool_id, worker_id, units);

-- Worker rows in (pool, worker id) order, one UPDATE each with the sum of its freed slots (issue
-- 20, #6): an UPDATE ... FROM join locks in whatever order its plan reads, and two reapers (or a
-- reaper and a release batch, which frees in worker id order) could then wait on each other.
INSERT INTO @freed (pool_id, worker_id, units)
SELECT x.pool_id, x.worker_id, SUM(x.units) FROM @ended AS x GROUP BY x.pool_id, x.worker_id;

WHILE 1 = 1
BEGIN
    SET @next_pool = NULL;
    SELECT TOP (1) @next_pool = f.pool_id, @next_worker = f.worker_id, @units = f.units
    FROM @freed AS f
    WHERE @pool IS NULL OR f.pool_id > @pool OR (f.pool_id = @pool AND f.worker_id > @worker)
    ORDER BY f.pool_id, f.worker_id;
    IF @next_pool IS NULL
        BREAK;
    SET @pool = @next_pool;
    SET @worker = @next_worker;

    UPDATE {schema}.workers
    SET load_slots = load_slots - @units
    WHERE pool_id = @pool AND worker_id = @worker;
END;

UPDATE c
SET capacity_version = c.capacity_version + 1
FROM {schema}.pool_changes AS c
WHERE c.pool_id IN (SELECT x.pool_id FROM @ended AS x);

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at, a.ended_at
FROM {schema}.allocations AS a
INNER JOIN @ended AS e ON e.allocation_id = a.allocation_id
ORDER BY a.expires_at;

-- The history past its retention, in its own short transaction after the reap. READPAST: rows
-- another purger holds are left to it. ORDER BY ended_at: the TOP is a range read of
-- ix_allocations_ended that stops after @purge_count rows, whatever the optimizer expects; a TOP
-- without an order leaves it free to scan the table under a row goal instead, which PostgreSQL's
-- planner chose and which reread every live row on each batch (issue 24, docs/benchmarks.md).
WITH old AS
(
    SELECT TOP (@purge_count) a.allocation_id
    FROM {schema}.allocations AS a WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE a.ended_at IS NOT NULL
      AND a.ended_at < DATEADD(millisecond, -CAST(@retention_ms % 1000 AS int), DATEADD(second, -CAST(@retention_ms / 1000 AS int), SYSUTCDATETIME()))
    ORDER BY a.ended_at
)
DELETE FROM old;
