-- 0003: the index for replays of ended keys. Built in the migration transaction: where the
-- edition allows it (Enterprise, Azure SQL), WITH (ONLINE = ON) is SQL Server's counterpart of
-- PostgreSQL's CREATE INDEX CONCURRENTLY for a large table on upgrade; it is not used here
-- because Standard and Express refuse it.

-- Idempotent replays: the latest allocation of a key, active or ended.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_session')
BEGIN
    CREATE NONCLUSTERED INDEX ix_allocations_session
        ON {schema}.allocations (pool_id, session_key)
        INCLUDE (ended_at);
END;
