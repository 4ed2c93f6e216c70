-- Blocking allocation of ONE request: the strict strategy, and the skip-locked strategy's last
-- resort after fresh skip-locked statements found only locked rows with room. Without READPAST:
-- the pick waits for the lock of the true least-loaded eligible row, bounded by SET LOCK_TIMEOUT
-- (error 1222 when it runs out; XACT_ABORT rolls back, nothing is written).
-- One request per statement (issue 12, #6): a transaction that waits here holds no other worker
-- row, so blocking allocations cannot wait on each other in a cycle (a batch picking row after
-- row in score order while holding its earlier picks deadlocked on PostgreSQL). The store sends
-- a batch's requests one after another, each in its own statement and transaction.
-- @pool_id nvarchar(128); @allocation_id uniqueidentifier; @session_key nvarchar(329): the stored
-- key, "owner U+001F key" for an owned allocation (issue 22);
-- @units int; @tags nvarchar(max): JSON array of required tags, or NULL; @lease_ms bigint or NULL
-- (the pool's default lease); @fallback_lease_ms bigint or NULL (the lease when neither the
-- request nor the pool names one); @fallback bit: 1 when called as the skip-locked strategy's last
-- resort (else the pool must be strict); @retention_ms bigint (HistoryRetention).
-- @fence bigint: NULL, or the sending activation's fence, as in allocate_skip_locked.sql: no row
-- once a later activation has claimed the pool (issue 47).
-- Result: one row: i (always 0), status 0 allocated, 1 existing, 2 no capacity; the allocation.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @default_lease_ms bigint;
DECLARE @heartbeat_ms bigint;
DECLARE @pool_found bit = 0;
DECLARE @strategy tinyint;
-- 0 spread (the least-loaded worker that fits first), 1 pack (the most-loaded; issue 49).
DECLARE @placement tinyint;
SELECT @pool_found = 1, @strategy = p.strategy, @placement = p.placement, @default_lease_ms = p.default_lease_ms, @heartbeat_ms = p.heartbeat_timeout_ms
FROM {schema}.pools AS p
WHERE p.pool_id = @pool_id;
IF @pool_found = 0
    THROW 50404, N'Pool not found.', 1;
IF @strategy = 0 AND @fallback = 0
    -- The pool was switched to skip-locked: the caller re-runs with allocate_skip_locked.sql.
    THROW 50412, N'Pool strategy changed.', 1;

DECLARE @now datetime2(7) = SYSUTCDATETIME();
-- @retention_ms (HistoryRetention) in seconds and milliseconds: DATEADD takes an int.
DECLARE @history_after datetime2(7) =
    DATEADD(millisecond, -CAST(@retention_ms % 1000 AS int), DATEADD(second, -CAST(@retention_ms / 1000 AS int), @now));
DECLARE @fresh_after datetime2(7) = CASE
    WHEN @heartbeat_ms IS NULL THEN CAST('0001-01-01' AS datetime2(7))
    ELSE DATEADD(millisecond, -CAST(@heartbeat_ms % 1000 AS int), DATEADD(second, -CAST(@heartbeat_ms / 1000 AS int), @now))
END;
DECLARE @lease bigint = COALESCE(@lease_ms, @default_lease_ms, @fallback_lease_ms);

DECLARE @existing uniqueidentifier;
DECLARE @epoch bigint;
DECLARE @status tinyint;
DECLARE @picked TABLE (worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, address nvarchar(512) NOT NULL);

BEGIN TRANSACTION;

IF @fence IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WITH (HOLDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE p.pool_id = @pool_id AND p.activation = @fence)
BEGIN
    -- Superseded: a later activation holds the pool. Nothing was written; no row.
    ROLLBACK TRANSACTION;
    RETURN;
END;

-- Idempotency: an active allocation for this key, else the latest one that ended within the
-- retention (a replay never allocates twice). Ended rows stay in this table until the reaper
-- purges them (docs/decisions/0012).
SELECT TOP (1) @existing = a.allocation_id
FROM {schema}.allocations AS a
WHERE a.pool_id = @pool_id AND a.session_key = @session_key
  AND (a.ended_at IS NULL OR a.ended_at > @history_after)
ORDER BY CASE WHEN a.ended_at IS NULL THEN 0 ELSE 1 END, a.ended_at DESC;

-- The true least-loaded eligible row (none when the key answered above), waiting for its lock
-- if another transaction holds it: the only worker row this transaction locks. UPDLOCK: ours
-- until commit; ROWLOCK: never a page lock; READCOMMITTEDLOCK: a locking read even under
-- read-committed snapshot, so the wait sees the committed load_slots.
-- Pack: the true most-loaded eligible row instead (the same index read from the other end).
IF @placement = 1
BEGIN
    WITH candidate AS
    (
        SELECT TOP (1) w.worker_id, w.address, w.load_slots, w.score
        FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
        WHERE @existing IS NULL
          AND w.pool_id = @pool_id
          AND w.state = 0
          AND w.capacity - w.load_slots >= @units
          AND w.last_heartbeat >= @fresh_after
          AND NOT EXISTS
          (
              SELECT 1 FROM OPENJSON(@tags) AS required_tag
              WHERE NOT EXISTS
              (
                  SELECT 1 FROM OPENJSON(w.tags) AS worker_tag
                  WHERE worker_tag.value COLLATE Latin1_General_100_BIN2 = required_tag.value COLLATE Latin1_General_100_BIN2
              )
          )
        ORDER BY w.score DESC, w.worker_id DESC
    )
    UPDATE candidate
    SET load_slots = load_slots + @units
    OUTPUT inserted.worker_id, inserted.address INTO @picked (worker_id, address);
END
ELSE
BEGIN
    WITH candidate AS
    (
        SELECT TOP (1) w.worker_id, w.address, w.load_slots, w.score
        FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
        WHERE @existing IS NULL
          AND w.pool_id = @pool_id
          AND w.state = 0
          AND w.capacity - w.load_slots >= @units
          AND w.last_heartbeat >= @fresh_after
          AND NOT EXISTS
          (
              SELECT 1 FROM OPENJSON(@tags) AS required_tag
              WHERE NOT EXISTS
              (
                  SELECT 1 FROM OPENJSON(w.tags) AS worker_tag
                  WHERE worker_tag.value COLLATE Latin1_General_100_BIN2 = required_tag.value COLLATE Latin1_General_100_BIN2
              )
          )
        ORDER BY w.score, w.worker_id
    )
    UPDATE candidate
    SET load_slots = load_slots + @units
    OUTPUT inserted.worker_id, inserted.address INTO @picked (worker_id, address);
END;

-- The key again, now that the wait is over (issue 20, #4): another transaction may have allocated
-- it and released it meanwhile, and the unique index covers active keys only, so an ended one does
-- not stop the insert below. A statement after the wait reads what committed during it. Found:
-- undo the load just added and answer that outcome.
IF @existing IS NULL AND EXISTS (SELECT 1 FROM @picked)
BEGIN
    SELECT TOP (1) @existing = a.allocation_id
    FROM {schema}.allocations AS a
    WHERE a.pool_id = @pool_id AND a.session_key = @session_key
      AND (a.ended_at IS NULL OR a.ended_at > @history_after)
    ORDER BY CASE WHEN a.ended_at IS NULL THEN 0 ELSE 1 END, a.ended_at DESC;
    IF @existing IS NOT NULL
    BEGIN
        UPDATE w
        SET load_slots = w.load_slots - @units
        FROM {schema}.workers AS w
        INNER JOIN @picked AS p ON p.worker_id = w.worker_id
        WHERE w.pool_id = @pool_id;
        DELETE FROM @picked;
    END;
END;

IF EXISTS (SELECT 1 FROM @picked)
BEGIN
    SET @epoch = NEXT VALUE FOR {schema}.epochs;

    INSERT INTO {schema}.allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
    SELECT @allocation_id, @pool_id, p.worker_id, p.address, @session_key, @units, @epoch, @now,
           CASE WHEN @lease IS NULL THEN NULL
                ELSE DATEADD(millisecond, CAST(@lease % 1000 AS int), DATEADD(second, CAST(@lease / 1000 AS int), @now)) END
    FROM @picked AS p;
END;

SET @status = CASE WHEN @existing IS NOT NULL THEN 1 WHEN EXISTS (SELECT 1 FROM @picked) THEN 0 ELSE 2 END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT CAST(0 AS int) AS i, @status AS status, CAST(0 AS int) AS rank_, CAST(0 AS bigint) AS excess_score,
       a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch,
       -- An expired lease is over at this statement's clock, reaped or not: never answered as live (#5).
       a.created_at, a.expires_at, COALESCE(a.ended_at, CASE WHEN a.expires_at <= @now THEN a.expires_at END) AS ended_at
FROM (SELECT 1 AS one) AS answer
LEFT JOIN {schema}.allocations AS a ON a.allocation_id = CASE @status WHEN 1 THEN @existing WHEN 0 THEN @allocation_id END;
