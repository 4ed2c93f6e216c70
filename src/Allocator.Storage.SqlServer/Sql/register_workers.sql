-- Registers or updates up to 1,000 workers of one pool (RegistrationBatches splits larger calls).
-- @pool_id; @workers nvarchar(max): JSON array of {"i": index, "w": worker id, "a": address, "c": capacity, "t": [tags]}.
-- Bounded so a statement holds far fewer than the ~5,000 locks that trigger escalation to a
-- table lock (which READPAST cannot pass, so it would stall allocation). See docs/sqlserver.md.
-- Result: one row per worker: status 0 created, 1 updated, 2 capacity below load_slots; the worker row.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

DECLARE @input TABLE
(
    worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
    i         int           NOT NULL,
    address   nvarchar(512) NOT NULL,
    capacity  int           NOT NULL,
    tags      nvarchar(max) NOT NULL
);
INSERT INTO @input (worker_id, i, address, capacity, tags)
SELECT r.w, r.i, r.a, r.c, r.t
FROM OPENJSON(@workers) WITH
(
    i int '$.i',
    w nvarchar(128) '$.w',
    a nvarchar(512) '$.a',
    c int '$.c',
    t nvarchar(max) '$.t' AS JSON
) AS r;

DECLARE @existing TABLE (worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY, load_slots int NOT NULL);

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

-- Existing workers, updated in (pool, worker id) order (the forced loop join walks @input by its
-- key), so concurrent batches queue instead of deadlocking. UPDATE-then-INSERT rather than MERGE.
-- Each row is locked by the statement that changes it, clustered key and index keys together:
-- no earlier "lock only" pass, which would hold clustered keys that allocation (reading the
-- eligible index with READPAST) cannot see and would then deadlock with. Re-registration: epoch
-- + 1, heartbeat refreshed, offline back to available, draining stays draining, load and live
-- allocations kept. A capacity below the current load changes nothing (CapacityBelowLoad).
UPDATE w
SET address = CASE WHEN i.capacity >= w.load_slots THEN i.address ELSE w.address END,
    capacity = CASE WHEN i.capacity >= w.load_slots THEN i.capacity ELSE w.capacity END,
    tags = CASE WHEN i.capacity >= w.load_slots THEN i.tags ELSE w.tags END,
    epoch = CASE WHEN i.capacity >= w.load_slots THEN w.epoch + 1 ELSE w.epoch END,
    last_heartbeat = CASE WHEN i.capacity >= w.load_slots THEN SYSUTCDATETIME() ELSE w.last_heartbeat END,
    state = CASE WHEN i.capacity >= w.load_slots AND w.state = 2 THEN 0 ELSE w.state END
OUTPUT inserted.worker_id, deleted.load_slots INTO @existing (worker_id, load_slots)
FROM @input AS i
INNER LOOP JOIN {schema}.workers AS w WITH (ROWLOCK)
    ON w.pool_id = @pool_id AND w.worker_id = i.worker_id;

-- New workers. Two batches inserting one new id race to the primary key: the loser fails with
-- 2627, its whole transaction rolls back and the store re-runs it, which then updates.
INSERT INTO {schema}.workers (pool_id, worker_id, address, capacity, load_slots, state, tags, epoch, last_heartbeat)
-- A new row continues the epoch of an earlier, deregistered registration of the id (#4).
SELECT @pool_id, i.worker_id, i.address, i.capacity, 0, 0, i.tags,
       ISNULL((SELECT r.epoch FROM {schema}.worker_epochs AS r WHERE r.pool_id = @pool_id AND r.worker_id = i.worker_id), 0) + 1,
       SYSUTCDATETIME()
FROM @input AS i
WHERE NOT EXISTS (SELECT 1 FROM @existing AS e WHERE e.worker_id = i.worker_id)
ORDER BY i.worker_id;

-- Wakes waiters on other instances (they poll pool_changes).
IF EXISTS (SELECT 1 FROM @input AS i LEFT JOIN @existing AS e ON e.worker_id = i.worker_id WHERE e.worker_id IS NULL OR i.capacity >= e.load_slots)
    UPDATE {schema}.pool_changes SET capacity_version = capacity_version + 1 WHERE pool_id = @pool_id;

COMMIT TRANSACTION;

SELECT i.i,
       CASE WHEN e.worker_id IS NULL THEN 0 WHEN i.capacity >= e.load_slots THEN 1 ELSE 2 END AS status,
       w.pool_id, w.worker_id, w.address, w.capacity, w.load_slots, w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
FROM @input AS i
LEFT JOIN @existing AS e ON e.worker_id = i.worker_id
INNER JOIN {schema}.workers AS w ON w.pool_id = @pool_id AND w.worker_id = i.worker_id
ORDER BY i.i;
