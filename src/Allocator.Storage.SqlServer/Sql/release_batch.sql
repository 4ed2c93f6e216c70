-- Ends a batch of allocations in one transaction (group commit of releases): the semantics of
-- release.sql applied item by item in request order, so a repeated id sees the earlier item's
-- release (the first current one wins, the rest answer "not active"). A lease that has expired is
-- "not active" whether or not the reaper has run (issue 20, #5), and is ended here as the reaper
-- would end it (at its expiry, 'expired'): its slots come back now and exactly once.
-- @pool_id nvarchar(128); @releases nvarchar(max): JSON array of {"i": index, "a": allocation id, "e": epoch,
-- "o": the owner releasing, or null for anyone (issue 22: another owner's allocation is answered
-- exactly as a missing one, status 1, and nothing of it is returned; an owner is the part of
-- session_key before the first U+001F, and a key without one has no owner)}
-- Result: one row per release in request order: status 0 ok, 1 not found, 2 not active,
-- 3 stale epoch, then the allocation's columns (NULL when not found).
-- @fence bigint: NULL for brokers' releases; for the release of an allocation whose caller gave
-- up, the releasing activation's fence (issue 47): once a later activation of the pool claimed it
-- (claim_pool_activation.sql), every item answers 3 (stale epoch) and nothing changes, since that
-- activation may have answered a retry of the key with the allocation.
-- Lock order, so that concurrent batches and single releases never deadlock one another: the
-- pool row (shared, held to the commit, only with a @fence: a claim waits for this release), then
-- allocation rows in allocation_id order, then worker rows in worker_id order (one UPDATE each).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @batch TABLE
(
    i             int              NOT NULL PRIMARY KEY,
    allocation_id uniqueidentifier NOT NULL,
    epoch         bigint           NOT NULL,
    owner         nvarchar(128)    COLLATE Latin1_General_100_BIN2 NULL
);
INSERT INTO @batch (i, allocation_id, epoch, owner)
SELECT r.i, r.a, r.e, r.o
FROM OPENJSON(@releases) WITH
(
    i int '$.i',
    a uniqueidentifier '$.a',
    e bigint '$.e',
    o nvarchar(128) '$.o'
) AS r;

-- The allocations the batch names, as this transaction sees them while it decides item by item.
DECLARE @rows TABLE
(
    allocation_id uniqueidentifier NOT NULL PRIMARY KEY,
    worker_id     nvarchar(128)    COLLATE Latin1_General_100_BIN2 NOT NULL,
    owner         nvarchar(128)    COLLATE Latin1_General_100_BIN2 NULL,
    units         int              NOT NULL,
    epoch         bigint           NOT NULL,
    active        bit              NOT NULL,
    released      bit              NOT NULL,
    lapsed        bit              NOT NULL
);
DECLARE @results TABLE
(
    i             int              NOT NULL PRIMARY KEY,
    status        tinyint          NOT NULL,
    allocation_id uniqueidentifier NOT NULL
);
DECLARE @freed TABLE
(
    worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY,
    units     int           NOT NULL
);

DECLARE @id uniqueidentifier;
DECLARE @next_id uniqueidentifier;
DECLARE @i int = -1;
DECLARE @epoch bigint;
DECLARE @owner nvarchar(128);
DECLARE @worker_id nvarchar(128);
DECLARE @next_worker nvarchar(128);
DECLARE @units int;
DECLARE @now datetime2(7) = SYSUTCDATETIME();

BEGIN TRANSACTION;

IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

IF @fence IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WITH (HOLDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE p.pool_id = @pool_id AND p.activation = @fence)
BEGIN
    -- Superseded: a later activation holds the pool.
    INSERT INTO @results (i, status, allocation_id) SELECT b.i, 3, b.allocation_id FROM @batch AS b;
    GOTO answer;
END;

-- 1. Allocation rows, one seek each in allocation_id order (a set-based lock would take them in
-- whatever order the plan reads them). UPDLOCK: release, renew and reap of one allocation
-- serialize on its row, so its slots are freed exactly once; ROWLOCK: never a page lock over
-- other callers' allocations; READCOMMITTEDLOCK: locking reads even under read-committed snapshot.
WHILE 1 = 1
BEGIN
    SET @next_id = NULL;
    SELECT TOP (1) @next_id = b.allocation_id
    FROM @batch AS b
    WHERE @id IS NULL OR b.allocation_id > @id
    ORDER BY b.allocation_id;
    IF @next_id IS NULL
        BREAK;
    SET @id = @next_id;

    INSERT INTO @rows (allocation_id, worker_id, owner, units, epoch, active, released, lapsed)
    SELECT a.allocation_id, a.worker_id,
           CASE WHEN CHARINDEX(NCHAR(31), a.session_key) > 0 THEN LEFT(a.session_key, CHARINDEX(NCHAR(31), a.session_key) - 1) END,
           a.units, a.epoch,
           CASE WHEN a.ended_at IS NULL AND (a.expires_at IS NULL OR a.expires_at > @now) THEN 1 ELSE 0 END, 0,
           CASE WHEN a.ended_at IS NULL AND a.expires_at <= @now THEN 1 ELSE 0 END
    FROM {schema}.allocations AS a WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
    WHERE a.allocation_id = @id AND a.pool_id = @pool_id;
END;

-- 2. Decide in request order; an item that releases makes a later repeat of its id "not active".
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @i = b.i, @id = b.allocation_id, @epoch = b.epoch, @owner = b.owner
    FROM @batch AS b
    WHERE b.i > @i
    ORDER BY b.i;
    IF @@ROWCOUNT = 0
        BREAK;

    INSERT INTO @results (i, status, allocation_id)
    SELECT @i,
           CASE WHEN r.allocation_id IS NULL THEN 1 WHEN r.active = 0 THEN 2 WHEN r.epoch <> @epoch THEN 3 ELSE 0 END,
           @id
    FROM (SELECT 1 AS one) AS item
    LEFT JOIN @rows AS r ON r.allocation_id = @id AND (@owner IS NULL OR r.owner IS NULL OR r.owner = @owner);

    UPDATE @rows SET active = 0, released = 1
    WHERE allocation_id = @id AND active = 1 AND epoch = @epoch AND (@owner IS NULL OR owner IS NULL OR owner = @owner);
END;

-- The rows are ours already: this converts the held update locks, it waits for nobody.
UPDATE a
SET ended_at = CASE WHEN r.lapsed = 1 THEN a.expires_at ELSE @now END,
    end_reason = CASE WHEN r.lapsed = 1 THEN 'expired' ELSE 'released' END
FROM {schema}.allocations AS a
INNER JOIN @rows AS r ON r.allocation_id = a.allocation_id
WHERE (r.released = 1 OR r.lapsed = 1) AND a.pool_id = @pool_id;

-- 3. Worker rows in worker_id order, each once with the sum of its freed units. The worker may
-- be gone (deregistered): nothing to free then. Not pre-locked with a separate SELECT, for the
-- reason release.sql gives (the UPDATE takes index and row locks at once).
INSERT INTO @freed (worker_id, units)
SELECT r.worker_id, SUM(r.units) FROM @rows AS r WHERE r.released = 1 OR r.lapsed = 1 GROUP BY r.worker_id;

WHILE 1 = 1
BEGIN
    SET @next_worker = NULL;
    SELECT TOP (1) @next_worker = f.worker_id, @units = f.units
    FROM @freed AS f
    WHERE @worker_id IS NULL OR f.worker_id > @worker_id
    ORDER BY f.worker_id;
    IF @next_worker IS NULL
        BREAK;
    SET @worker_id = @next_worker;

    UPDATE {schema}.workers
    SET load_slots = load_slots - @units
    WHERE pool_id = @pool_id AND worker_id = @worker_id;
END;

-- One change per batch for the pollers of other instances, and only when something was freed.
IF EXISTS (SELECT 1 FROM @freed)
    UPDATE {schema}.pool_changes SET capacity_version = capacity_version + 1 WHERE pool_id = @pool_id;

answer:
-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT r.i, r.status,
       a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch, a.created_at, a.expires_at, a.ended_at
FROM @results AS r
LEFT JOIN {schema}.allocations AS a ON a.allocation_id = r.allocation_id AND a.pool_id = @pool_id AND r.status <> 1
ORDER BY r.i;
