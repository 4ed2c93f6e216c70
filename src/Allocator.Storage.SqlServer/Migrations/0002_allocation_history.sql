-- 0002: the history, kept in place. Ended allocations stay in this store's allocations table (a
-- release is an in-place update here, no dead tuple to vacuum as in PostgreSQL, where they move
-- to a table of their own: docs/decisions/0012); a replay of an ended key within the retention
-- answers the ended allocation, and the reaper purges rows past it.

-- The purge finds ended rows past the retention.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_ended')
BEGIN
    CREATE NONCLUSTERED INDEX ix_allocations_ended
        ON {schema}.allocations (ended_at)
        WHERE ended_at IS NOT NULL;
END;
