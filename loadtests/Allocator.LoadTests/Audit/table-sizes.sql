-- The sustained workload's minute report: size of each table of the run's schema and of its
-- indexes, dead tuples, and how often autovacuum has vacuumed and analyzed it so far.
-- {schema} is replaced by the quoted schema; @schema (text) is the bare name.
SELECT c.relname,
       pg_relation_size(c.oid) AS heap_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       coalesce(s.n_live_tup, 0) AS live_tuples,
       coalesce(s.n_dead_tup, 0) AS dead_tuples,
       coalesce(s.autovacuum_count, 0) AS autovacuums,
       coalesce(s.autoanalyze_count, 0) AS autoanalyzes
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE n.nspname = @schema AND c.relkind = 'r' AND c.relname IN ('allocations', 'allocation_history', 'workers')
 ORDER BY c.relname;
