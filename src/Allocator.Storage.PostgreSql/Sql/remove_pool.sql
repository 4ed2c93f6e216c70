-- The last step of a move (after remove_pool_lock.sql, in the same implicit transaction): delete
-- the pool from this, its old, database only if it has no worker and no active allocation. A
-- statement of its own so that its snapshot, taken after the lock, sees every registration that
-- committed before it (one snapshot for both would miss a registration the lock waited for, and
-- ON DELETE CASCADE would then delete that worker with the pool). Its workers' epochs go with it
-- (cascade). Ended allocations stay in allocation_history (no foreign key) until
-- HistoryRetention purges them. A removal notifies the pool's settings channel ($2), so cached
-- settings are dropped on every instance.
WITH counts AS (
    SELECT (SELECT count(*) FROM {schema}.workers w WHERE w.pool_id = $1)::integer AS workers,
           (SELECT count(*) FROM {schema}.allocations a WHERE a.pool_id = $1) AS active
), removed AS (
    DELETE FROM {schema}.pools p USING counts c
     WHERE p.pool_id = $1 AND c.workers = 0 AND c.active = 0
    RETURNING p.pool_id
), notified AS (
    SELECT pg_notify($2, $1 || ':s') FROM removed
)
SELECT EXISTS (SELECT 1 FROM {schema}.pools p WHERE p.pool_id = $1) AS found,
       (SELECT count(*) FROM removed)::integer AS removed,
       c.workers, c.active,
       (SELECT count(*) FROM notified) AS _n
  FROM counts c;
