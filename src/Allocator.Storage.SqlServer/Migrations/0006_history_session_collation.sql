-- 0006: PostgreSQL builds a byte-wise index for the history's key lookups (issue 20, #7). Here
-- ended allocations stay in the allocations table, whose session_key is binary (0001, checked by
-- 0005) and indexed by ix_allocations_session (0003): nothing to change, only checked, so both
-- stores number their migrations alike.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_session')
    THROW 50500, N'ix_allocations_session is expected (migration 0003).', 1;
