-- Batches the run's schema sent to PostgreSQL so far: calls of allocate_batch (one per allocation
-- batch, single requests included), from the cumulative function statistics (track_functions =
-- 'pl', which the scale harness sets on its servers). $1: the schema.
SELECT coalesce(sum(f.calls), 0)::bigint
  FROM pg_stat_user_functions f
 WHERE f.schemaname = $1 AND f.funcname = 'allocate_batch';
