-- How this server replicates its commits (issue 48), as PostgreSQL reports it: one row per
-- standby connected to it (none: one row of nulls), with the settings that decide whether a
-- commit waits for a standby. A commit waits only when synchronous_commit is on, remote_write or
-- remote_apply and the standby is named in synchronous_standby_names (sync_state sync or quorum).
-- Without pg_read_all_stats, another role's replication rows hide their state: the settings then
-- say whether commits wait.
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('synchronous_standby_names') AS synchronous_standby_names,
       r.application_name,
       r.sync_state,
       r.pid IS NOT NULL AS connected
  FROM (SELECT 1) AS one
  LEFT JOIN pg_stat_replication AS r ON true;
