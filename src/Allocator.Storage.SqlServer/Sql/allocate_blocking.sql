-- Blocking batch allocation: the strict strategy, and the skip-locked strategy's last resort
-- after fresh skip-locked statements found only locked rows with room. Same shape as
-- allocate.sql without READPAST: each pick waits for the lock of the true least-loaded eligible
-- row, bounded by SET LOCK_TIMEOUT (error 1222 when it runs out; nothing is written then).
-- @pool_id nvarchar(128); @requests nvarchar(max): the JSON array allocate.sql takes;
-- @fallback bit: 1 when called as the skip-locked strategy's last resort (else the pool must be strict).
-- Result: one row per request: status 0 allocated, 1 existing, 2 no capacity.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

DECLARE @default_lease_ms bigint;
DECLARE @heartbeat_ms bigint;
DECLARE @pool_found bit = 0;
DECLARE @strategy tinyint;
SELECT @pool_found = 1, @strategy = p.strategy, @default_lease_ms = p.default_lease_ms, @heartbeat_ms = p.heartbeat_timeout_ms
FROM {schema}.pools AS p
WHERE p.pool_id = @pool_id;
IF @pool_found = 0
    THROW 50404, N'Pool not found.', 1;
IF @strategy = 0 AND @fallback = 0
    -- The pool was switched to skip-locked: the caller re-runs with allocate.sql.
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
    session_key   nvarchar(200)    COLLATE Latin1_General_100_BIN2 NOT NULL,
    units         int              NOT NULL,
    tags          nvarchar(max)    NULL,
    lease_ms      bigint           NULL
);
INSERT INTO @batch (i, allocation_id, session_key, units, tags, lease_ms)
SELECT r.i, r.a, r.k, r.u, r.t, r.l
FROM OPENJSON(@requests) WITH
(
    i int '$.i',
    a uniqueidentifier '$.a',
    k nvarchar(200) '$.k',
    u int '$.u',
    t nvarchar(max) '$.t' AS JSON,
    l bigint '$.l'
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
DECLARE @session_key nvarchar(200);
DECLARE @units int;
DECLARE @tags nvarchar(max);
DECLARE @lease_ms bigint;
DECLARE @existing uniqueidentifier;
DECLARE @epoch bigint;

BEGIN TRANSACTION;

WHILE 1 = 1
BEGIN
    SELECT TOP (1) @i = b.i, @allocation_id = b.allocation_id, @session_key = b.session_key,
                   @units = b.units, @tags = b.tags, @lease_ms = COALESCE(b.lease_ms, @default_lease_ms)
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

    -- The true least-loaded eligible row, waiting for its lock if another transaction holds it.
    -- UPDLOCK: ours until commit; ROWLOCK: never a page lock; READCOMMITTEDLOCK: a locking read
    -- even under read-committed snapshot, so the wait sees the committed load_slots.
    WITH candidate AS
    (
        SELECT TOP (1) w.worker_id, w.address, w.load_slots, w.score
        FROM {schema}.workers AS w WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
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

    IF NOT EXISTS (SELECT 1 FROM @picked)
    BEGIN
        INSERT INTO @results (i, status, allocation_id, rank_, excess_score) VALUES (@i, 2, NULL, 0, 0);
        CONTINUE;
    END;

    SET @epoch = NEXT VALUE FOR {schema}.epochs;

    INSERT INTO {schema}.allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
    SELECT @allocation_id, @pool_id, p.worker_id, p.address, @session_key, @units, @epoch, @now,
           CASE WHEN @lease_ms IS NULL THEN NULL
                ELSE DATEADD(millisecond, CAST(@lease_ms % 1000 AS int), DATEADD(second, CAST(@lease_ms / 1000 AS int), @now)) END
    FROM @picked AS p;

    INSERT INTO @results (i, status, allocation_id, rank_, excess_score)
    VALUES (@i, 0, @allocation_id, 0, 0);
END;

COMMIT TRANSACTION;

SELECT r.i, r.status, r.rank_, r.excess_score,
       a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch,
       -- An expired lease is over at this statement's clock, reaped or not: never answered as live (#5).
       a.created_at, a.expires_at, COALESCE(a.ended_at, CASE WHEN a.expires_at <= @now THEN a.expires_at END) AS ended_at
FROM @results AS r
LEFT JOIN {schema}.allocations AS a ON a.allocation_id = r.allocation_id
ORDER BY r.i;
