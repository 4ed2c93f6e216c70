-- Migrator: what is applied. kind 'm' = migration (version, name, checksum), 'f' = function file.
SELECT 'm' AS kind, m.version, m.name, m.checksum FROM {schema}.schema_migrations m
UNION ALL
SELECT 'f', NULL, f.name, f.checksum FROM {schema}.schema_functions f;
