-- Heartbeat (database time) and optional load index, only with the current registration epoch.
-- FOR NO KEY UPDATE so the epoch check and the update see the same row version.
WITH target AS (
    SELECT w.epoch FROM {schema}.workers w
     WHERE w.pool_id = $1 AND w.worker_id = $2
       FOR NO KEY UPDATE
), changed AS (
    UPDATE {schema}.workers w
       SET last_heartbeat = now(), reported_load_index = coalesce($4::integer, w.reported_load_index)
      FROM target t
     WHERE w.pool_id = $1 AND w.worker_id = $2 AND t.epoch = $3
    RETURNING 1
), notified AS (
    SELECT pg_notify($5, $1 || ':c') FROM changed
)
SELECT (SELECT epoch FROM target) AS epoch, (SELECT count(*) FROM changed)::integer AS changed,
       (SELECT count(*) FROM notified) AS _n;
