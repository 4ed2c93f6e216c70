-- allocate_skip_locked.sql, sent by a pool grain's activation with its fence ($8): no row when a
-- later activation has claimed the pool ({schema}.allocate_batch_fenced, issue 47).
SELECT * FROM {schema}.allocate_batch_fenced($1, $2::text[], $3::integer[], $4::jsonb, $5::bigint[], true, NULL, $6, $7::bigint[], $8::bigint);
