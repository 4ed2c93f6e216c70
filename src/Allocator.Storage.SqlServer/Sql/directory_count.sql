-- Pools per database, for the placement rule "the database with the fewest pools": the
-- directory's entries by database (a pool being moved counts where it is going), and this (the
-- default) database's pools without an entry under the default's name (@default_database).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT ISNULL(d.moving_to, d.[database]) AS [database], COUNT_BIG(*) AS pools
FROM {schema}.pool_directory AS d
GROUP BY ISNULL(d.moving_to, d.[database])
UNION ALL
SELECT @default_database, COUNT_BIG(*)
FROM {schema}.pools AS p
WHERE NOT EXISTS (SELECT 1 FROM {schema}.pool_directory AS d WHERE d.pool_id = p.pool_id);
