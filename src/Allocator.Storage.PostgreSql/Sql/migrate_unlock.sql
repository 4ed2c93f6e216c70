-- Migrator: releases migrate_lock.sql's session lock (the connection goes back to a pool that
-- does not reset sessions), and puts back the connection's own statement_timeout, which
-- migrate_prepare.sql lifted (reset_val: what RESET would set; one statement, so it can take $1).
SELECT pg_advisory_unlock(hashtext('allocator.migrate'), hashtext($1)),
       set_config('statement_timeout', s.reset_val, false)
  FROM pg_settings s
 WHERE s.name = 'statement_timeout';
