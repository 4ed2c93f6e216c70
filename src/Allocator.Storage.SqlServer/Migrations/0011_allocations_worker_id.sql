-- 0011: PostgreSQL replaces its (worker_id, pool_id) index by one on worker_id alone (issue 24):
-- with statistics that counted the hot table empty, a btree condition on its later column
-- (pool_id) was checked over the whole index, once per key of allocate_batch's active-key probe.
-- Here deregistration's ix_allocations_worker_active is (pool_id, worker_id) WHERE ended_at IS
-- NULL, led by the pool: whether SQL Server's optimizer ever prefers its pool prefix to
-- ux_allocations_active_session's seek can only be seen with an engine (ADR 0024, "SQL Server:
-- what of this applies"), so nothing is changed blind; only checked, so both stores number their
-- migrations alike.
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'ix_allocations_worker_active')
    THROW 50500, N'ix_allocations_worker_active is expected (migration 0001).', 1;
