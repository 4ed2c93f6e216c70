-- 0004: the active-allocations-by-worker index leads with worker_id.
--
-- It was (pool_id, worker_id). For allocate_batch's check of which session keys are already
-- active (pool_id = $1 AND session_key = ANY ($2) AND ended_at IS NULL) the planner could then
-- choose it over the active-session index: a pool created after the table's last ANALYZE has
-- no statistics, is estimated at one row, and both indexes look equally cheap. Measured in
-- wide-250 (a fresh pool filling to 90,000 active allocations): the check scanned every active
-- allocation of the pool, 183 ms of a 190 ms batch statement (auto_explain). Led by worker_id,
-- this index cannot serve a pool-only condition, so the check always probes the session index
-- by key. Its one user, deregistration (pool_id and worker_id both given), is served as before.
DROP INDEX {schema}.allocations_active_worker;
CREATE INDEX allocations_active_worker ON {schema}.allocations (worker_id, pool_id) WHERE ended_at IS NULL;
