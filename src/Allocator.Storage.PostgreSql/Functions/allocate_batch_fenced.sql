-- allocate_batch (Functions/allocate_batch.sql), but only while p_fence is still the pool's
-- activation fence (issue 47, invariant 14): an activation superseded while its instance hung
-- may wake with callers parked or queued in memory, whose brokers have since been answered by
-- its successor or have gone. Once the successor has claimed the pool (claim_pool_activation.sql)
-- such a statement allocates nothing and returns no row; the caller reads that as "superseded".
--
-- The pool's row is held FOR SHARE until the commit, before any worker or allocation row (the
-- order every statement takes them in), as release_abandoned.sql does: a claim (an UPDATE of the
-- row) waits for a batch in flight to commit, and a batch that starts after a claim sees the new
-- fence (read committed re-reads a row it waited for). Batches of one activation share the lock.
-- A pool that does not exist has no row to hold: allocate_batch answers as it always does.
CREATE OR REPLACE FUNCTION {schema}.allocate_batch_fenced(
    p_pool text, p_keys text[], p_units integer[], p_tags jsonb, p_lease_ms bigint[],
    p_skip boolean, p_lock_timeout text, p_retention_ms bigint, p_fallback_lease_ms bigint[], p_fence bigint)
RETURNS TABLE (
    ord integer, status text, allocation_id uuid, worker_id text, address text, session_key text,
    units integer, epoch bigint, created_at timestamptz, expires_at timestamptz,
    rank integer, excess_score bigint, ended_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    v_activation bigint;
BEGIN
    SELECT p.activation INTO v_activation FROM {schema}.pools p WHERE p.pool_id = p_pool FOR SHARE;
    IF FOUND AND v_activation IS DISTINCT FROM p_fence THEN
        RETURN; -- superseded: nothing allocated
    END IF;

    RETURN QUERY SELECT * FROM {schema}.allocate_batch(p_pool, p_keys, p_units, p_tags, p_lease_ms, p_skip, p_lock_timeout, p_retention_ms, p_fallback_lease_ms);
END
$fn$;
