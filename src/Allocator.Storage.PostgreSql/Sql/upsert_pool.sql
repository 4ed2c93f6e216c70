-- Creates or updates a pool's runtime settings. xmax = 0 tells an insert from an update.
-- An update notifies every instance so their cached settings (strategy) are dropped at once.
-- $8 (placement) comes after the channel ($7) so the earlier parameters keep their places.
WITH up AS (
    INSERT INTO {schema}.pools AS p (pool_id, strategy, default_lease_ms, max_wait_ms, heartbeat_timeout_ms, serialize_registrations, placement)
    VALUES ($1, $2, $3, $4, $5, $6, $8)
    ON CONFLICT (pool_id) DO UPDATE
       SET strategy = excluded.strategy, default_lease_ms = excluded.default_lease_ms,
           max_wait_ms = excluded.max_wait_ms, heartbeat_timeout_ms = excluded.heartbeat_timeout_ms,
           serialize_registrations = excluded.serialize_registrations, placement = excluded.placement
    RETURNING (p.xmax = 0) AS created
), notified AS (
    SELECT pg_notify($7, $1 || ':s') FROM up WHERE NOT up.created
)
SELECT created, (SELECT count(*) FROM notified) AS _n FROM up;
