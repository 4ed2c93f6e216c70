-- Ends an allocation the pool's grain made for a caller who gave up before it was answered, as
-- one item of release_batch (its answer, its lock order), but only while p_fence is still the
-- pool's activation fence (issue 47, invariant 14). An activation superseded while its instance
-- hung may wake after its successor answered a retry of the same key with this allocation: then
-- the fence has moved, nothing changes, and the answer is 'superseded'.
--
-- The pool's row is held FOR SHARE until the commit, before any allocation or worker row (the
-- order every statement takes them in): a claim (claim_pool_activation.sql, an UPDATE of the row)
-- waits for this release to commit, and a release that starts after a claim sees the new fence.
-- So a successor's first batch, which runs after its claim, reads the allocation either ended or
-- still active for good.
CREATE OR REPLACE FUNCTION {schema}.release_abandoned(p_pool text, p_id uuid, p_epoch bigint, p_channel text, p_fence bigint)
RETURNS TABLE (
    ord integer, status text, allocation_id uuid, worker_id text, address text, session_key text,
    units integer, epoch bigint, created_at timestamptz, expires_at timestamptz, ended_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM {schema}.pools p WHERE p.pool_id = p_pool AND p.activation = p_fence FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 'superseded'::text, p_id, NULL::text, NULL::text, NULL::text,
                            NULL::integer, NULL::bigint, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz;
        RETURN;
    END IF;

    RETURN QUERY SELECT * FROM {schema}.release_batch(p_pool, ARRAY[p_id], ARRAY[p_epoch], p_channel, ARRAY[NULL::text]);
END
$fn$;
