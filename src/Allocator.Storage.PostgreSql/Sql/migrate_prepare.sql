-- Migrator: the schema and the migrator's own bookkeeping, under migrate_lock.sql (IF NOT EXISTS
-- still races on the catalog without it). checksum: SHA-256 of the file as embedded, so an
-- applied migration that was edited afterwards is refused loudly, and a function is re-applied
-- exactly when its file changed.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE {schema}.schema_migrations ADD COLUMN IF NOT EXISTS checksum text NULL;
CREATE TABLE IF NOT EXISTS {schema}.schema_functions (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
