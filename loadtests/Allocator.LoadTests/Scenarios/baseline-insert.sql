-- BASELINE ONLY. Round trip 3, lock still held: record the allocation (round trip 4 commits).
INSERT INTO {schema}.allocations (allocation_id, pool_id, worker_id, session_key, units, epoch, created_at)
VALUES (@allocation_id, @pool_id, @worker_id, @session_key, @units, nextval('{schema}.lt_baseline_epoch'), now());
