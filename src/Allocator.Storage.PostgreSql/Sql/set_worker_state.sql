-- Drain, undrain or take offline. Undrain (back to available) notifies waiters.
WITH changed AS (
    UPDATE {schema}.workers w SET state = $3
     WHERE w.pool_id = $1 AND w.worker_id = $2
    RETURNING w.pool_id
), notified AS (
    SELECT pg_notify($4, $1 || ':c') FROM changed WHERE $3 = 'available'
)
SELECT (SELECT count(*) FROM changed)::integer AS found, (SELECT count(*) FROM notified) AS _n;
