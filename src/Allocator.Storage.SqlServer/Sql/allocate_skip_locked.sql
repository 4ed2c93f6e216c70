-- Skip-locked batch allocation: one round trip, one transaction, water filling.
-- @pool_id nvarchar(128); @requests nvarchar(max): JSON array of
--   {"i": index, "a": allocation id, "k": session key, "u": units, "t": [required tags] | null, "l": lease ms | null,
--    "f": lease ms when neither the request nor the pool names one | null}
-- Result: one row per request: status 0 allocated, 1 existing, 2 no capacity, 3 only locked rows
-- had room (the caller retries those in a fresh statement, then falls back to allocate_blocking).
-- @fence bigint: NULL, or the fence of the pool grain's activation that sends the batch (issue 47):
-- once a later activation has claimed the pool (claim_pool_activation.sql), no row is answered
-- and nothing is written (an activation superseded while its instance hung must not allocate for
-- callers answered elsewhere or gone). The pool row is then read shared and held to the commit,
-- before any worker row (a claim waits for this batch to commit).
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
IF @strategy <> 0
    -- The pool was switched to strict: the caller re-runs with allocate_blocking.sql.
    THROW 50412, N'Pool strategy changed.', 1;

DECLARE @now datetime2(7) = SYSUTCDATETIME();
-- @retention_ms (HistoryRetention) in seconds and milliseconds: DATEADD takes an int.
DECLARE @history_after datetime2(7) =
    DATEADD(millisecond, -CAST(@retention_ms % 1000 AS int), DATEADD(second, -CAST(@retention_ms / 1000 AS int), @now));
DECLARE @fresh_after datetime2(7) = CASE
    WHEN @heartbeat_ms IS NULL THEN CAST('0001-01-01' AS datetime2(7))
    ELSE DATEADD(millisecond, -CAST(@heartbeat_ms % 1000 AS int), DATEADD(second, -CAST(@heartbeat_ms / 1000 AS int), @now))
END;

DECLARE @batch TABLE
(
    i             int              NOT NULL PRIMARY KEY,
    allocation_id uniqueidentifier NOT NULL,
    session_key   nvarchar(400)    COLLATE Latin1_General_100_BIN2 NOT NULL,
    units         int              NOT NULL,
    tags          nvarchar(max)    NULL,
    lease_ms      bigint           NULL
);
-- The lease: the request's, else the pool's default as read above, else the caller's fallback.
INSERT INTO @batch (i, allocation_id, session_key, units, tags, lease_ms)
SELECT r.i, r.a, r.k, r.u, r.t, COALESCE(r.l, @default_lease_ms, r.f)
FROM OPENJSON(@requests) WITH
(
    i int '$.i',
    a uniqueidentifier '$.a',
    k nvarchar(400) '$.k',
    u int '$.u',
    t nvarchar(max) '$.t' AS JSON,
    l bigint '$.l',
    f bigint '$.f'
) AS r;

DECLARE @results TABLE
(
    i             int              NOT NULL PRIMARY KEY,
    status        tinyint          NOT NULL,
    allocation_id uniqueidentifier NULL,
    rank_         int              NOT NULL,
    excess_score  bigint           NOT NULL
);
DECLARE @picked TABLE (worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL, address nvarchar(512) NOT NULL, old_score bigint NOT NULL);

DECLARE @i int = -1;
DECLARE @allocation_id uniqueidentifier;
DECLARE @session_key nvarchar(400);
DECLARE @units int;
DECLARE @tags nvarchar(max);
DECLARE @lease_ms bigint;
DECLARE @existing uniqueidentifier;
DECLARE @epoch bigint;
DECLARE @worker_id nvarchar(128);
DECLARE @old_score bigint;
DECLARE @rank int;
DECLARE @min_score bigint;

BEGIN TRANSACTION;

IF @fence IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WITH (HOLDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE p.pool_id = @pool_id AND p.activation = @fence)
BEGIN
    -- Superseded: a later activation holds the pool. Nothing was written; no row.
    ROLLBACK TRANSACTION;
    RETURN;
END;

WHILE 1 = 1
BEGIN
    -- Out of budget part-way through the batch: stop here, roll everything back (nothing written).
    IF SYSUTCDATETIME() > @deadline
        THROW 50408, N'Statement time budget exceeded; rolled back.', 1;

    SELECT TOP (1) @i = b.i, @allocation_id = b.allocation_id, @session_key = b.session_key,
                   @units = b.units, @tags = b.tags, @lease_ms = b.lease_ms
    FROM @batch AS b
    WHERE b.i > @i
    ORDER BY b.i;
    IF @@ROWCOUNT = 0
        BREAK;

    -- Idempotency: an active allocation for this key (also one made earlier in this batch), else
    -- the latest one that ended within the retention (a replay never allocates twice).
    -- Ended rows stay in this table until the reaper purges them (docs/decisions/0012).
    SET @existing = NULL;
    SELECT TOP (1) @existing = a.allocation_id
    FROM {schema}.allocations AS a
    WHERE a.pool_id = @pool_id AND a.session_key = @session_key
      AND (a.ended_at IS NULL OR a.ended_at > @history_after)
    ORDER BY CASE WHEN a.ended_at IS NULL THEN 0 ELSE 1 END, a.ended_at DESC;
    IF @existing IS NOT NULL
    BEGIN
        INSERT INTO @results (i, status, allocation_id, rank_, excess_score) VALUES (@i, 1, @existing, 0, 0);
        CONTINUE;
    END;

    DELETE FROM @picked;

    -- The least-loaded eligible row nobody else has locked. UPDLOCK: the row is ours until
    -- commit (no lost update of load_slots); READPAST: a row another transaction holds is passed over,
    -- never waited for; ROWLOCK: never a page lock that would hide neighbouring free rows;
    -- READCOMMITTEDLOCK: READPAST needs locking read committed even where the database uses
    -- read-committed snapshot. Rows this transaction already holds are not skipped, so each pick
    -- sees the batch's earlier picks (water filling). ix_workers_eligible makes the ORDER BY a seek.
    -- Pack reads the same index from the other end: the most-loaded eligible row nobody holds.
    IF @placement = 1
    BEGIN
        WITH candidate AS
        (
            SELECT TOP (1) w.worker_id, w.address, w.load_slots, w.score
            FROM {schema}.workers AS w WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
            WHERE w.pool_id = @pool_id
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
        OUTPUT inserted.worker_id, inserted.address, deleted.score INTO @picked (worker_id, address, old_score);
    END
    ELSE
    BEGIN
        WITH candidate AS
        (
            SELECT TOP (1) w.worker_id, w.address, w.load_slots, w.score
            FROM {schema}.workers AS w WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
            WHERE w.pool_id = @pool_id
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
        OUTPUT inserted.worker_id, inserted.address, deleted.score INTO @picked (worker_id, address, old_score);
    END;

    IF NOT EXISTS (SELECT 1 FROM @picked)
    BEGIN
        -- Nothing unlocked had room. A dirty probe (no locks taken, none waited for) tells "no
        -- capacity" from "only locked rows have room"; the latter is retried by the caller.
        INSERT INTO @results (i, status, allocation_id, rank_, excess_score)
        SELECT @i,
               CASE WHEN EXISTS
               (
                   SELECT 1
                   FROM {schema}.workers AS w WITH (READUNCOMMITTED)
                   WHERE w.pool_id = @pool_id
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
               ) THEN 3 ELSE 2 END,
               NULL, 0, 0;
        CONTINUE;
    END;

    SELECT @worker_id = p.worker_id, @old_score = p.old_score FROM @picked AS p;
    SET @epoch = NEXT VALUE FOR {schema}.epochs;

    INSERT INTO {schema}.allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
    SELECT @allocation_id, @pool_id, p.worker_id, p.address, @session_key, @units, @epoch, @now,
           CASE WHEN @lease_ms IS NULL THEN NULL
                ELSE DATEADD(millisecond, CAST(@lease_ms % 1000 AS int), DATEADD(second, CAST(@lease_ms / 1000 AS int), @now)) END
    FROM @picked AS p;

    -- Telemetry: eligible rows ranked ahead of the pick were skipped because another
    -- transaction held them. Counted with a dirty read: it must not wait for those locks.
    SET @rank = 0;
    SET @min_score = @old_score;
    -- Under pack, "ahead" is fuller: the excess is how far below the fullest the pick scored.
    SELECT @rank = COUNT(*),
           @min_score = CASE WHEN @placement = 1 THEN ISNULL(MAX(w.score), @old_score) ELSE ISNULL(MIN(w.score), @old_score) END
    FROM {schema}.workers AS w WITH (READUNCOMMITTED)
    WHERE w.pool_id = @pool_id
      AND w.state = 0
      AND w.capacity - w.load_slots >= @units
      AND w.last_heartbeat >= @fresh_after
      AND ((@placement = 0 AND (w.score < @old_score OR (w.score = @old_score AND w.worker_id < @worker_id)))
        OR (@placement = 1 AND (w.score > @old_score OR (w.score = @old_score AND w.worker_id > @worker_id))));

    INSERT INTO @results (i, status, allocation_id, rank_, excess_score)
    VALUES (@i, 0, @allocation_id, @rank, ABS(@old_score - @min_score));
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT r.i, r.status, r.rank_, r.excess_score,
       a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch,
       -- An expired lease is over at this statement's clock, reaped or not: never answered as live (#5).
       a.created_at, a.expires_at, COALESCE(a.ended_at, CASE WHEN a.expires_at <= @now THEN a.expires_at END) AS ended_at
FROM @results AS r
LEFT JOIN {schema}.allocations AS a ON a.allocation_id = r.allocation_id
ORDER BY r.i;
