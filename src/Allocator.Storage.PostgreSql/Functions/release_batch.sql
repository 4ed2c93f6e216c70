-- Ends a batch of allocations in one statement (one round trip, one commit when called in
-- autocommit), with the semantics of release.sql applied item by item in request order: each
-- item answers 'released', 'not_found', 'not_active' or 'stale_epoch'; a repeated id sees the
-- earlier item's release (the first current one wins, the rest are 'not_active'). An expired
-- lease is 'not_active', ended at its expiry, whether or not the reaper has run (issue 20, #5).
-- One pg_notify per batch, when units were freed (released, or expired leases ended here).
-- Lock order, so that concurrent batches, single releases, renews and allocations never
-- deadlock one another:
--   1. allocation rows in allocation_id order (FOR UPDATE, as release.sql and renew.sql take it:
--      release, renew and reap of one allocation serialize on it);
--   2. worker rows in (pool_id, worker_id) order (FOR NO KEY UPDATE, as allocate_batch takes
--      them), then one UPDATE per worker with the sum of its freed units.
-- The worker of an allocation may be gone (deregistered): nothing to free then.
-- Owners (issue 22): p_owners[i] is the principal releasing item i (NULL: anyone). An allocation of
-- another owner is answered 'not_found', exactly as a missing one, and nothing of it is returned.
-- The owner of an allocation is the part of its session_key before the first U+001F (a key without
-- one has no owner, and anyone may release it). The 4-parameter release_batch (before p_owners) is
-- left in place for the previous build during a rolling upgrade (docs/postgresql.md).
CREATE OR REPLACE FUNCTION {schema}.release_batch(p_pool text, p_ids uuid[], p_epochs bigint[], p_channel text, p_owners text[])
RETURNS TABLE (
    ord integer, status text, allocation_id uuid, worker_id text, address text, session_key text,
    units integer, epoch bigint, created_at timestamptz, expires_at timestamptz, ended_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
-- Output columns share names with table columns: names in queries mean the columns.
#variable_conflict use_column
DECLARE
    v_a       {schema}.allocations;
    v_h       {schema}.allocation_history;
    v_workers text[] := '{}';
    v_units   integer[] := '{}';
    v_freed   record;
    i         integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.pools p WHERE p.pool_id = p_pool) THEN
        RAISE EXCEPTION 'pool % does not exist', p_pool USING ERRCODE = 'P0002';
    END IF;

    PERFORM 1 FROM {schema}.allocations a
      WHERE a.pool_id = p_pool AND a.allocation_id = ANY (p_ids)
      ORDER BY a.allocation_id
        FOR UPDATE;

    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        ord := i - 1;
        -- Locked above, so this reads the current row, including this batch's own changes (a
        -- repeated id released earlier in the batch is in the history by now).
        SELECT * INTO v_a FROM {schema}.allocations a
         WHERE a.allocation_id = p_ids[i] AND a.pool_id = p_pool
           AND (p_owners[i] IS NULL OR strpos(a.session_key, chr(31)) = 0 OR split_part(a.session_key, chr(31), 1) = p_owners[i]);
        IF NOT FOUND THEN
            SELECT * INTO v_h FROM {schema}.allocation_history h
             WHERE h.allocation_id = p_ids[i] AND h.pool_id = p_pool
               AND (p_owners[i] IS NULL OR strpos(h.session_key, chr(31)) = 0 OR split_part(h.session_key, chr(31), 1) = p_owners[i]);
            status := CASE WHEN FOUND THEN 'not_active' ELSE 'not_found' END;
            allocation_id := p_ids[i]; worker_id := v_h.worker_id; address := v_h.address; session_key := v_h.session_key;
            units := v_h.units; epoch := v_h.epoch; created_at := v_h.created_at; expires_at := v_h.expires_at; ended_at := v_h.ended_at;
            v_h := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        ended_at := NULL;
        IF v_a.expires_at <= now() THEN
            -- Over at its expiry, reaped or not (issue 20, #5): 'not_active', and ended here as
            -- the reaper would end it (locked anyway), so its units come back now and exactly once.
            DELETE FROM {schema}.allocations a WHERE a.allocation_id = v_a.allocation_id;
            INSERT INTO {schema}.allocation_history AS h
            VALUES (v_a.allocation_id, v_a.pool_id, v_a.worker_id, v_a.address, v_a.session_key, v_a.units,
                    v_a.epoch, v_a.created_at, v_a.expires_at, v_a.expires_at, 'expired')
            RETURNING h.ended_at INTO ended_at;
            v_workers := v_workers || v_a.worker_id::text;
            v_units := v_units || v_a.units;
            status := 'not_active';
        ELSIF v_a.epoch <> p_epochs[i] THEN
            status := 'stale_epoch';
        ELSE
            -- Out of the hot table, into the history (docs/decisions/0012).
            DELETE FROM {schema}.allocations a WHERE a.allocation_id = v_a.allocation_id;
            INSERT INTO {schema}.allocation_history AS h
            VALUES (v_a.allocation_id, v_a.pool_id, v_a.worker_id, v_a.address, v_a.session_key, v_a.units,
                    v_a.epoch, v_a.created_at, v_a.expires_at, now(), 'released')
            RETURNING h.ended_at INTO ended_at;
            v_workers := v_workers || v_a.worker_id::text;
            v_units := v_units || v_a.units;
            status := 'released';
        END IF;

        allocation_id := v_a.allocation_id; worker_id := v_a.worker_id; address := v_a.address;
        session_key := v_a.session_key; units := v_a.units; epoch := v_a.epoch;
        created_at := v_a.created_at; expires_at := v_a.expires_at;
        RETURN NEXT;
    END LOOP;

    IF array_length(v_workers, 1) IS NULL THEN
        RETURN;
    END IF;

    -- Worker rows in worker_id order: FOR UPDATE inside an UPDATE ... FROM join has no defined
    -- lock order, so the locks are taken here first, each worker once.
    PERFORM 1 FROM {schema}.workers w
      WHERE w.pool_id = p_pool AND w.worker_id = ANY (v_workers)
      ORDER BY w.worker_id
        FOR NO KEY UPDATE;

    FOR v_freed IN
        SELECT f.worker_id, sum(f.units)::integer AS units
          FROM unnest(v_workers, v_units) AS f (worker_id, units)
         GROUP BY f.worker_id
         ORDER BY f.worker_id COLLATE "C"
    LOOP
        UPDATE {schema}.workers w SET load = w.load - v_freed.units
         WHERE w.pool_id = p_pool AND w.worker_id = v_freed.worker_id;
    END LOOP;

    PERFORM pg_notify(p_channel, p_pool || ':c');
END
$fn$;
