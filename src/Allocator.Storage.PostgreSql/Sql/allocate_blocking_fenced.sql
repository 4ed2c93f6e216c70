-- allocate_blocking.sql, sent by a pool grain's activation with its fence ($9): no row when a
-- later activation has claimed the pool ({schema}.allocate_batch_fenced, issue 47). The pool's
-- row is held before the wait for the worker's row lock, bounded by lock_timeout ($6) as before.
SELECT * FROM {schema}.allocate_batch_fenced($1, $2::text[], $3::integer[], $4::jsonb, $5::bigint[], false, $6, $7, $8::bigint[], $9::bigint);
