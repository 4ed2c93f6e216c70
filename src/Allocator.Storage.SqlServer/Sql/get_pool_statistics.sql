-- Pool statistics: settings plus aggregates over workers and active allocations.
-- No row when the pool does not exist. Not a hot path.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};

SELECT p.strategy, p.default_lease_ms, p.max_wait_ms, p.heartbeat_timeout_ms, p.serialize_registrations,
       ISNULL(w.workers, 0) AS workers,
       ISNULL(w.available_workers, 0) AS available_workers,
       ISNULL(w.capacity, 0) AS capacity,
       ISNULL(w.load_slots, 0) AS load_slots,
       ISNULL(w.free_slots, 0) AS free_slots,
       ISNULL(a.active_allocations, 0) AS active_allocations,
       ISNULL(w.min_load, 0) AS min_load,
       ISNULL(w.max_load, 0) AS max_load,
       ISNULL(w.min_score, 0) AS min_score,
       ISNULL(w.max_score, 0) AS max_score
FROM {schema}.pools AS p
OUTER APPLY
(
    SELECT COUNT(*) AS workers,
           SUM(CASE WHEN x.state = 0 THEN 1 ELSE 0 END) AS available_workers,
           SUM(CAST(x.capacity AS bigint)) AS capacity,
           SUM(CAST(x.load_slots AS bigint)) AS load_slots,
           SUM(CASE WHEN x.state = 0 THEN CAST(x.capacity - x.load_slots AS bigint) ELSE 0 END) AS free_slots,
           MIN(CASE WHEN x.state = 0 THEN x.load_slots END) AS min_load,
           MAX(CASE WHEN x.state = 0 THEN x.load_slots END) AS max_load,
           MIN(CASE WHEN x.state = 0 THEN x.score END) AS min_score,
           MAX(CASE WHEN x.state = 0 THEN x.score END) AS max_score
    FROM {schema}.workers AS x
    WHERE x.pool_id = p.pool_id
) AS w
OUTER APPLY
(
    SELECT COUNT_BIG(*) AS active_allocations
    FROM {schema}.allocations AS y
    WHERE y.pool_id = p.pool_id AND y.ended_at IS NULL
) AS a
WHERE p.pool_id = @pool_id;
