-- First statement of a pool's removal (remove_pool.sql follows in the same implicit
-- transaction): lock the pool row. FOR UPDATE waits for a registration batch in flight (the
-- foreign key check of its worker insert holds FOR KEY SHARE on the row) and makes one that comes
-- later wait for the removal and then fail on the foreign key, so that remove_pool.sql, a later
-- statement with a later snapshot, counts every worker that can still exist.
SELECT p.pool_id FROM {schema}.pools p WHERE p.pool_id = $1 FOR UPDATE;
