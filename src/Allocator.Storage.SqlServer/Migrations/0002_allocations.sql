-- Allocations. Guarded like every migration so that a re-run changes nothing.

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
