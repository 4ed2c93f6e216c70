-- Compare and set of a pool's directory entry: $2/$3 the entry expected (database NULL: no entry
-- yet), $4/$5 the new one. One statement: of two instances racing for the same pool, exactly one
-- sees its expected entry (the primary key, or the row lock of the UPDATE, orders them). A
-- replacement notifies the pool's settings channel ($6), so every instance drops its cached route.
WITH inserted AS (
    INSERT INTO {schema}.pool_directory AS d (pool_id, database, moving_to)
    SELECT $1, $4, $5 WHERE $2::text IS NULL
    ON CONFLICT (pool_id) DO NOTHING
    RETURNING d.pool_id
), updated AS (
    UPDATE {schema}.pool_directory d
       SET database = $4, moving_to = $5, placed_at = now()
     WHERE $2::text IS NOT NULL AND d.pool_id = $1
       AND d.database = $2 AND d.moving_to IS NOT DISTINCT FROM $3::text
    RETURNING d.pool_id
), done AS (
    SELECT pool_id FROM inserted UNION ALL SELECT pool_id FROM updated
), notified AS (
    SELECT pg_notify($6, $1 || ':s') FROM done
)
SELECT (SELECT count(*) FROM done)::integer AS replaced, (SELECT count(*) FROM notified) AS _n;
