-- allocator:no-transaction
-- 0011: the index by worker holds worker_id alone (issue 24).
--
-- allocations_worker (worker_id, pool_id) was led by worker_id so that the planner could "never
-- use it for a pool-only condition" (0001, 0002). It can: a btree condition on a later column
-- is checked over the whole index. With statistics that counted `allocations` empty (taken after
-- a quiet night, every allocation ended, the table's pages still there) every index looks as
-- cheap as the next, the smaller tree wins, and allocate_batch's probe of which keys are active
-- read the pool's every active allocation through this index, once per key: 128,000 index
-- entries for a batch of 64 over 2,000 active allocations (ExplainTests), 141 ms of a 144 ms
-- statement at 27,000. Without pool_id, only allocations_session can serve a pool's condition.
-- Deregistration finds a worker's rows by worker_id and checks the pool on each (a worker id
-- shared by several pools costs their few extra rows).
--
-- Built before the old one is dropped, both without blocking allocations and releases, and
-- re-runnable (a failed concurrent build leaves an invalid index, dropped first).
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocations_worker_id;
CREATE INDEX CONCURRENTLY allocations_worker_id ON {schema}.allocations (worker_id);
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocations_worker;
