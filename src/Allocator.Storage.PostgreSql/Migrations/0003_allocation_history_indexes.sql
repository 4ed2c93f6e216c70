-- allocator:no-transaction
-- 0003: the history's indexes, built without blocking writes: on upgrade the history holds every
-- allocation that ever ended (0002 moved them), and a plain CREATE INDEX would hold off every
-- release for the length of the build. Each statement is re-runnable (a failed concurrent build
-- leaves an invalid index behind, dropped first on the next start).

-- Idempotent replays of ended keys: the latest ended allocation of a key within the retention.
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_session;
CREATE INDEX CONCURRENTLY allocation_history_session ON {schema}.allocation_history (pool_id, session_key, ended_at);

-- The purge deletes in ended_at order, which is insertion order: a BRIN index (a few pages per
-- gigabyte) finds the old ranges; a btree here would cost an index insert per release.
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_ended;
CREATE INDEX CONCURRENTLY allocation_history_ended ON {schema}.allocation_history USING brin (ended_at);
