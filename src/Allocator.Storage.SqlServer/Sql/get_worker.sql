-- One worker; no worker row when it does not exist. Throws 50404 when the pool does not.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
IF NOT EXISTS (SELECT 1 FROM {schema}.pools AS p WHERE p.pool_id = @pool_id)
    THROW 50404, N'Pool not found.', 1;

-- The load leaves out the slots of leases that have expired, reaped or not (issue 20, #5).
SELECT w.pool_id, w.worker_id, w.address, w.capacity,
       w.load_slots - ISNULL((SELECT SUM(a.units) FROM {schema}.allocations AS a
                              WHERE a.pool_id = w.pool_id AND a.worker_id = w.worker_id
                                AND a.ended_at IS NULL AND a.expires_at <= SYSUTCDATETIME()), 0) AS load_slots,
       w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
FROM {schema}.workers AS w
WHERE w.pool_id = @pool_id AND w.worker_id = @worker_id;
