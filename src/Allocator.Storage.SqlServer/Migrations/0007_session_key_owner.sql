-- 0007: a session key belongs to its owner (issue 22). The store keeps an owned allocation's key as
-- "owner U+001F key" (src/Shared/StoredSessionKey.cs) in session_key, whose unique index then
-- enforces one active allocation per (pool, owner, key): up to 128 + 1 + 200 characters, so the
-- column grows from nvarchar(200) to nvarchar(400). Its two indexes are dropped and built again
-- around the change (in the migration's transaction: on a large table, at a quiet hour).
IF EXISTS (SELECT 1 FROM sys.columns
           WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'session_key' AND max_length < 800)
BEGIN
    DROP INDEX IF EXISTS ux_allocations_active_session ON {schema}.allocations;
    DROP INDEX IF EXISTS ix_allocations_session ON {schema}.allocations;
    ALTER TABLE {schema}.allocations ALTER COLUMN session_key nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL;
END;

-- Invariant 4 (idempotency), now per owner: one active allocation per stored key per pool.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ux_allocations_active_session')
BEGIN
    CREATE UNIQUE NONCLUSTERED INDEX ux_allocations_active_session
        ON {schema}.allocations (pool_id, session_key)
        WHERE ended_at IS NULL;
END;

-- Idempotent replays: the latest allocation of a key, active or ended (as 0003).
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_session')
BEGIN
    CREATE NONCLUSTERED INDEX ix_allocations_session
        ON {schema}.allocations (pool_id, session_key)
        INCLUDE (ended_at);
END;
