-- Terminates the backends of one cluster's instances (found by their application name, a LIKE
-- pattern such as 'faults-std-1a2b3c-%'), as an operator or a failover would:
--   'all'          every backend of the cluster (pool connections, the LISTEN connection, membership)
--   'lock-waiters' only those waiting for a lock right now (blocking fallback, strict strategy)
--   'listener'     only the change feed's LISTEN connection: its last statement is the LISTEN, the
--                  catch-up read of every pool id after a reconnect (Sql/get_pool_ids.sql, as the store sends it: without its semicolon) or the
--                  keepalive ping (SELECT 1); nothing else the service runs looks like that
-- Returns how many were terminated.
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS terminated
  FROM pg_stat_activity
 WHERE application_name LIKE @pattern
   AND pid <> pg_backend_pid()
   AND (   @which = 'all'
        OR (@which = 'lock-waiters' AND wait_event_type = 'Lock')
        OR (@which = 'listener' AND (query LIKE 'LISTEN %' OR query = 'SELECT 1' OR query LIKE '%SELECT p.pool_id::text FROM %.pools p%')));
