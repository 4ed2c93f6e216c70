-- Deletes a worker and ends its active allocations. Two statements on purpose: the DELETE waits
-- for any allocation holding the worker's row lock; the UPDATE then runs with a fresh snapshot
-- (READ COMMITTED, volatile function) and so also ends an allocation that committed while the
-- DELETE waited. After the DELETE no allocation can land on the worker: allocators skip or
-- re-check the deleted row.
CREATE OR REPLACE FUNCTION {schema}.deregister_worker(p_pool text, p_worker text)
RETURNS TABLE (removed integer, ended integer)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    DELETE FROM {schema}.workers w WHERE w.pool_id = p_pool AND w.worker_id = p_worker;
    GET DIAGNOSTICS removed = ROW_COUNT;
    ended := 0;
    IF removed > 0 THEN
        UPDATE {schema}.allocations a SET ended_at = now(), end_reason = 'worker-deregistered'
         WHERE a.pool_id = p_pool AND a.worker_id = p_worker AND a.ended_at IS NULL;
        GET DIAGNOSTICS ended = ROW_COUNT;
    END IF;
    RETURN NEXT;
END
$fn$;
