-- 0010: PostgreSQL drops the history's default-collation session index (issue 24), which only the
-- build before issue 20 used. Here there never was a second one: ended allocations stay in the
-- allocations table, whose binary session_key has the one index ix_allocations_session (0003).
-- Nothing to change, only checked, so both stores number their migrations alike.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_session')
    THROW 50500, N'ix_allocations_session is expected (migration 0003).', 1;
