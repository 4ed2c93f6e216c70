-- Migration step 3 of 3, after each migration script in the same transaction: record it.
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES (@version, @name, @checksum);
