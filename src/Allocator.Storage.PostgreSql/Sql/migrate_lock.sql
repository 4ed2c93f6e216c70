-- Migrator: one migrator per schema at a time, across instances. A session lock (not a
-- transaction lock): some migrations run outside a transaction (CREATE INDEX CONCURRENTLY), so
-- the lock must outlive each transaction. Released by migrate_unlock.sql, or by the server when
-- the connection drops. Keys: a fixed name and the schema.
SELECT pg_advisory_lock(hashtext('allocator.migrate'), hashtext($1));
