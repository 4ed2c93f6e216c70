-- Migrator: releases migrate_lock.sql's session lock (the connection goes back to a pool that does not reset sessions).
SELECT pg_advisory_unlock(hashtext('allocator.migrate'), hashtext($1));
