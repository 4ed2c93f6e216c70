-- 0001: the baseline schema (pools, their change counters, workers, allocations). Applied by
-- SqlServerMigrator inside one transaction under sp_getapplock; every statement is guarded so a
-- re-run changes nothing. Squashed from the pre-release 0001_pools_and_workers and 0002_allocations.
-- Ids use a binary collation: worker order must equal ordinal string order (the tie-breaker the
-- in-memory reference store uses), and equality must be exact (no case folding).

IF OBJECT_ID(N'{schema}.pools', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.pools
    (
        pool_id                 nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        strategy                tinyint       NOT NULL,
        default_lease_ms        bigint        NULL,
        max_wait_ms             bigint        NOT NULL,
        heartbeat_timeout_ms    bigint        NULL,
        serialize_registrations bit           NOT NULL,
        created_at              datetime2(7)  NOT NULL CONSTRAINT df_pools_created_at DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT pk_pools PRIMARY KEY CLUSTERED (pool_id),
        CONSTRAINT ck_pools_strategy CHECK (strategy IN (0, 1))
    );
END;

-- Change counters live apart from the pool row: releases and registrations bump them, and a
-- bump must not X-lock the row every allocation reads its settings from. Other instances poll
-- this table (no Service Broker WAITFOR, no parked waiters inside the database).
IF OBJECT_ID(N'{schema}.pool_changes', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.pool_changes
    (
        pool_id          nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        capacity_version bigint NOT NULL CONSTRAINT df_pool_changes_capacity DEFAULT (0),
        settings_version bigint NOT NULL CONSTRAINT df_pool_changes_settings DEFAULT (0),
        CONSTRAINT pk_pool_changes PRIMARY KEY CLUSTERED (pool_id),
        CONSTRAINT fk_pool_changes_pool FOREIGN KEY (pool_id) REFERENCES {schema}.pools (pool_id)
    );
END;

IF OBJECT_ID(N'{schema}.workers', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.workers
    (
        pool_id             nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        worker_id           nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        address             nvarchar(512) NOT NULL,
        capacity            int           NOT NULL,
        -- Worker.Load (slots in use); not named load, a reserved word in T-SQL.
        load_slots          int           NOT NULL CONSTRAINT df_workers_load DEFAULT (0),
        reported_load_index int           NULL,
        state               tinyint       NOT NULL CONSTRAINT df_workers_state DEFAULT (0),
        -- Normalized JSON array (distinct, ordinal order), matched with OPENJSON.
        tags                nvarchar(max) NOT NULL,
        epoch               bigint        NOT NULL,
        last_heartbeat      datetime2(7)  NOT NULL,
        -- WorkerScore.Compute, in bigint arithmetic (typed literals: an untyped 10^12 would be
        -- numeric). greatest(load_slots * 10^12 / capacity, index * 10^8); integer division truncates
        -- like C# for these non-negative values. Persisted so the eligible index can key on it.
        score AS CAST(
            CASE
                WHEN CAST(load_slots AS bigint) * CAST(1000000000000 AS bigint) / capacity
                     >= CAST(ISNULL(reported_load_index, 0) AS bigint) * CAST(100000000 AS bigint)
                THEN CAST(load_slots AS bigint) * CAST(1000000000000 AS bigint) / capacity
                ELSE CAST(ISNULL(reported_load_index, 0) AS bigint) * CAST(100000000 AS bigint)
            END AS bigint) PERSISTED NOT NULL,
        CONSTRAINT pk_workers PRIMARY KEY CLUSTERED (pool_id, worker_id),
        CONSTRAINT fk_workers_pool FOREIGN KEY (pool_id) REFERENCES {schema}.pools (pool_id),
        CONSTRAINT ck_workers_capacity CHECK (capacity BETWEEN 1 AND 1000000),
        -- Invariant 1: 0 <= load_slots <= capacity, enforced by the engine as a last line of defence.
        CONSTRAINT ck_workers_load CHECK (load_slots >= 0 AND load_slots <= capacity),
        CONSTRAINT ck_workers_state CHECK (state IN (0, 1, 2)),
        CONSTRAINT ck_workers_index CHECK (reported_load_index BETWEEN 0 AND 10000)
    );
END;

-- Makes the allocation ORDER BY (score, worker_id) an ordered seek within one pool's available
-- workers: cost grows with log(pool size). Filtered on the plain state column (a filter may not
-- reference a computed column; a key may). Covers every column the selection reads.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.workers') AND name = N'ix_workers_eligible')
BEGIN
    CREATE NONCLUSTERED INDEX ix_workers_eligible
        ON {schema}.workers (pool_id, score, worker_id)
        INCLUDE (capacity, load_slots, last_heartbeat, address, tags)
        WHERE state = 0;
END;

-- Lock escalation is left at its default (TABLE). Registration statements touch at most
-- RegistrationBatches.MaxRowsPerStatement (1,000) rows, far below the ~5,000-locks-per-statement
-- threshold, so they never escalate; see docs/sqlserver.md for why not LOCK_ESCALATION = DISABLE.

IF OBJECT_ID(N'{schema}.epochs', N'SO') IS NULL
BEGIN
    -- Fencing epochs: unique and increasing across all allocations; renew takes a new one.
    CREATE SEQUENCE {schema}.epochs AS bigint START WITH 1 INCREMENT BY 1 CACHE 1000;
END;

-- Allocations.

IF OBJECT_ID(N'{schema}.allocations', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.allocations
    (
        -- Clustered on an ever-increasing surrogate: version-7 GUIDs do not sort by time in
        -- SQL Server's uniqueidentifier order, so clustering on them would split pages.
        seq           bigint IDENTITY(1, 1) NOT NULL,
        allocation_id uniqueidentifier NOT NULL,
        pool_id       nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        worker_id     nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        address       nvarchar(512) NOT NULL,
        session_key   nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
        units         int           NOT NULL,
        epoch         bigint        NOT NULL,
        created_at    datetime2(7)  NOT NULL,
        expires_at    datetime2(7)  NULL,
        ended_at      datetime2(7)  NULL,
        end_reason    varchar(32)   NULL,
        CONSTRAINT pk_allocations PRIMARY KEY NONCLUSTERED (allocation_id),
        CONSTRAINT fk_allocations_pool FOREIGN KEY (pool_id) REFERENCES {schema}.pools (pool_id),
        CONSTRAINT ck_allocations_units CHECK (units >= 1)
    );
END;

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'cx_allocations')
BEGIN
    CREATE UNIQUE CLUSTERED INDEX cx_allocations ON {schema}.allocations (seq);
END;

-- Invariant 4 (idempotency): one active allocation per session key per pool. A concurrent
-- duplicate fails with 2601; the store retries and the retry returns the existing allocation.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ux_allocations_active_session')
BEGIN
    CREATE UNIQUE NONCLUSTERED INDEX ux_allocations_active_session
        ON {schema}.allocations (pool_id, session_key)
        WHERE ended_at IS NULL;
END;

-- The reaper's ORDER BY expires_at, over active leases only.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_expiry')
BEGIN
    CREATE NONCLUSTERED INDEX ix_allocations_expiry
        ON {schema}.allocations (expires_at)
        INCLUDE (pool_id, worker_id, units)
        WHERE ended_at IS NULL AND expires_at IS NOT NULL;
END;

-- Deregistration ends a worker's active allocations.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_worker_active')
BEGIN
    CREATE NONCLUSTERED INDEX ix_allocations_worker_active
        ON {schema}.allocations (pool_id, worker_id)
        INCLUDE (units)
        WHERE ended_at IS NULL;
END;
