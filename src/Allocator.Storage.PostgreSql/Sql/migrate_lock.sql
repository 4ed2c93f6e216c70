-- Migrator: one migrator per schema at a time, across instances. A session lock (not a
-- transaction lock): some migrations run outside a transaction (CREATE INDEX CONCURRENTLY), so
-- the lock must outlive each transaction. Tried, not waited for: a migrator blocked inside
-- pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY in the lock holder waits for
-- every older snapshot to go away (a deadlock, 40P01, measured with 8 migrators). The caller
-- polls. Released by migrate_unlock.sql, or by the server when the connection drops.
SELECT pg_try_advisory_lock(hashtext('allocator.migrate'), hashtext($1));
