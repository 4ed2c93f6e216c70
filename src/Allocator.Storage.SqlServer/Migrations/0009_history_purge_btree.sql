-- 0009: PostgreSQL replaces the BRIN index its purge used with a btree on ended_at (issue 24): a
-- BRIN summary only widens, so once purged pages were refilled every purge batch reread them.
-- Here the purge has always found old rows through the btree ix_allocations_ended (0002), whose
-- entries leave with their rows: nothing to change, only checked, so both stores number their
-- migrations alike.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_ended')
    THROW 50500, N'ix_allocations_ended is expected (migration 0002).', 1;
