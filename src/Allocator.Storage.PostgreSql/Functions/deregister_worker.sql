-- Deletes a worker and ends its active allocations (moved to the history, 'worker-deregistered').
-- Two statements on purpose: the DELETE waits for any allocation holding the worker's row lock;
-- the move then runs with a fresh snapshot
-- (READ COMMITTED, volatile function) and so also ends an allocation that committed while the
-- DELETE waited. After the DELETE no allocation can land on the worker: allocators skip or
-- re-check the deleted row.
CREATE OR REPLACE FUNCTION {schema}.deregister_worker(p_pool text, p_worker text)
RETURNS TABLE (removed integer, ended integer)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_epoch bigint;
BEGIN
    -- Lock order (#9): the worker's allocation rows first, in allocation_id order, then the worker
    -- row, as release, release_batch and the reaper take them (allocations, then workers). The
    -- other way round, a release batch holding one of these allocations and waiting for the
    -- worker deadlocked with this function.
    PERFORM 1 FROM {schema}.allocations a
      WHERE a.pool_id = p_pool AND a.worker_id = p_worker
      ORDER BY a.allocation_id
        FOR UPDATE;
    DELETE FROM {schema}.workers w WHERE w.pool_id = p_pool AND w.worker_id = p_worker
    RETURNING w.epoch INTO v_epoch;
    GET DIAGNOSTICS removed = ROW_COUNT;
    ended := 0;
    IF removed > 0 THEN
        -- The epoch outlives the row: a later registration of this id continues from it (#4).
        INSERT INTO {schema}.worker_epochs AS e (pool_id, worker_id, epoch) VALUES (p_pool, p_worker, v_epoch)
        ON CONFLICT (pool_id, worker_id) DO UPDATE SET epoch = greatest(e.epoch, excluded.epoch);

        -- A lease that had expired ended then, before the worker left (issue 20, #5).
        WITH moved AS (
            DELETE FROM {schema}.allocations a WHERE a.pool_id = p_pool AND a.worker_id = p_worker
            RETURNING a.*
        )
        INSERT INTO {schema}.allocation_history
        SELECT m.allocation_id, m.pool_id, m.worker_id, m.address, m.session_key, m.units, m.epoch,
               m.created_at, m.expires_at,
               CASE WHEN m.expires_at <= now() THEN m.expires_at ELSE now() END,
               CASE WHEN m.expires_at <= now() THEN 'expired' ELSE 'worker-deregistered' END
          FROM moved m;
        GET DIAGNOSTICS ended = ROW_COUNT;
    END IF;
    RETURN NEXT;
END
$fn$;
