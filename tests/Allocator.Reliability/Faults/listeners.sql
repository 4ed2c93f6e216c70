-- How many instances of one cluster (application names LIKE @pattern) have their change feed's
-- LISTEN connection open: recognised as in terminate-backends.sql.
SELECT count(DISTINCT application_name)
  FROM pg_stat_activity
 WHERE application_name LIKE @pattern
   AND (query LIKE 'LISTEN %' OR query = 'SELECT 1' OR query LIKE '%SELECT p.pool_id::text FROM %.pools p%');
