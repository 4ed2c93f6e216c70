-- Migrator: a migration was applied ($1 version, $2 name, $3 checksum).
INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3);
