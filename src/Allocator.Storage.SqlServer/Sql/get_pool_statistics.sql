-- Pool statistics: settings plus aggregates over workers and active allocations.
-- No row when the pool does not exist. Not a hot path. A lease that has expired holds nothing,
-- whether or not the reaper has run (issue 20, #5): neither it nor its slots count, as allocate
-- (which ends the pool's expired leases before answering no capacity) sees them.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
DECLARE @now datetime2(7) = SYSUTCDATETIME();

SELECT p.strategy, p.default_lease_ms, p.max_wait_ms, p.heartbeat_timeout_ms, p.serialize_registrations, p.placement,
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
    FROM
    (
        -- Loads without the slots of expired leases (ix_allocations_expiry: few rows), and the
        -- score those loads give (WorkerScore.Compute, as the computed column).
        SELECT v.state, v.capacity, v.load_slots,
               CASE WHEN CAST(v.load_slots AS bigint) * CAST(1000000000000 AS bigint) / v.capacity
                         >= CAST(ISNULL(v.reported_load_index, 0) AS bigint) * CAST(100000000 AS bigint)
                    THEN CAST(v.load_slots AS bigint) * CAST(1000000000000 AS bigint) / v.capacity
                    ELSE CAST(ISNULL(v.reported_load_index, 0) AS bigint) * CAST(100000000 AS bigint) END AS score
        FROM
        (
            SELECT ws.state, ws.capacity, ws.reported_load_index, ws.load_slots - ISNULL(e.units, 0) AS load_slots
            FROM {schema}.workers AS ws
            LEFT JOIN
            (
                SELECT ex.worker_id, SUM(ex.units) AS units
                FROM {schema}.allocations AS ex
                WHERE ex.pool_id = p.pool_id AND ex.ended_at IS NULL AND ex.expires_at <= @now
                GROUP BY ex.worker_id
            ) AS e ON e.worker_id = ws.worker_id
            WHERE ws.pool_id = p.pool_id
        ) AS v
    ) AS x
) AS w
OUTER APPLY
(
    SELECT COUNT_BIG(*) AS active_allocations
    FROM {schema}.allocations AS y
    WHERE y.pool_id = p.pool_id AND y.ended_at IS NULL AND (y.expires_at IS NULL OR y.expires_at > @now)
) AS a
WHERE p.pool_id = @pool_id;
