-- BASELINE ONLY. Round trip 3, lock still held: record the allocation (round trip 4 commits).
INSERT INTO {schema}.allocations (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at)
SELECT @allocation_id, @pool_id, @worker_id, w.address, @session_key, @units, nextval('{schema}.lt_baseline_epoch'), now()
FROM {schema}.workers w
WHERE w.pool_id = @pool_id AND w.worker_id = @worker_id;
