-- The blocking variant (strict strategy, and the skip-locked strategy's last resort): waits for
-- the row lock of the true least-loaded eligible worker, bounded by lock_timeout ($6), which
-- allocate_batch sets with set_config(..., is_local => true) so it ends with this autocommit
-- statement. A timeout surfaces as SQLSTATE 55P03. $7: HistoryRetention in ms. $8: each
-- request's lease when neither it ($5) nor the pool names one.
SELECT * FROM {schema}.allocate_batch($1, $2::text[], $3::integer[], $4::jsonb, $5::bigint[], false, $6, $7, $8::bigint[]);
