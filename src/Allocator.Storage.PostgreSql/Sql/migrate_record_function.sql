-- Migrator: a function file was applied ($1 file name, $2 checksum).
INSERT INTO {schema}.schema_functions AS f (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now();
