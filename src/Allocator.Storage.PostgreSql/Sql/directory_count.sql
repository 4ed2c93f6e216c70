-- Pools per database, for the placement rule "the database with the fewest pools": the
-- directory's entries by database, and this (the default) database's pools without an entry
-- under the default's name ($1). A pool being moved counts where it is going.
SELECT coalesce(d.moving_to, d.database) AS database, count(*) AS pools
  FROM {schema}.pool_directory d
 GROUP BY 1
UNION ALL
SELECT $1, count(*)
  FROM {schema}.pools p
 WHERE NOT EXISTS (SELECT 1 FROM {schema}.pool_directory d WHERE d.pool_id = p.pool_id);
