-- Ends a batch of allocations in one statement (one round trip, one commit when called in
-- autocommit), with the semantics of release.sql applied item by item in request order: each
-- item answers 'released', 'not_found', 'not_active' or 'stale_epoch'; a repeated id sees the
-- earlier item's release (the first current one wins, the rest are 'not_active'). An expired
-- lease is 'not_active', ended at its expiry, whether or not the reaper has run (issue 20, #5).
-- One pg_notify per batch, when units were freed (released, or expired leases ended here).
--
-- Set-based (issue 24): the items are decided together, not one by one. The first item of an id
-- that ends it is its "winner": on an expired lease the first item that may see it (the lease
-- lapses there), else the first whose epoch is current. Items of that id before the winner had a
-- current row with another epoch ('stale_epoch'), items after it find it ended ('not_active'); an
-- id with no winner stays active ('stale_epoch'). That is exactly what the items applied one
-- after another answer. Five statements for the batch instead of about four per item: measured
-- at loopback, 2.15 ms per call of ~18 items before (pg_stat_user_functions).
--
-- Lock order, so that concurrent batches, single releases, renews and allocations never
-- deadlock one another:
--   1. allocation rows in allocation_id order (FOR UPDATE, as release.sql and renew.sql take it:
--      release, renew and reap of one allocation serialize on it);
--   2. worker rows in (pool_id, worker_id) order (FOR NO KEY UPDATE, as allocate_batch takes
--      them), then one UPDATE of them with the sum of each one's freed units.
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
-- enable_seqscan = off: as allocate_batch (a sequential read of the hot tables reads every dead row
-- version the churn leaves; the statistics cost it by the live rows only).
-- plan_cache_mode = force_generic_plan: left to choose, PostgreSQL planned four of these statements
-- anew on every call (their custom plans looked cheaper than the generic one), 9% of the database's
-- CPU per step at loopback (pg_stat_statements; issue 24: 203 -> 184 us per step, medians of 3).
-- A generic plan does not know the pool, so every read of `allocations` by id writes the pool test
-- as "(a.pool_id = p_pool) IS TRUE", which no index can serve: otherwise a pool the statistics
-- estimate at one row made the pool's prefix of allocations_session look as cheap as the
-- primary key, and the read took every active allocation of the pool (ExplainTests).
-- The joins to `allocations` also name the batch's ids ("allocation_id = ANY (p_ids)"): with
-- statistics that counted the table empty (after a quiet night: its pages there, its rows not)
-- every join order looks as cheap as another, and a merge join read the whole primary key twice
-- per call (issue 24, ExplainTests: 2,000 and 1,936 rows for a batch of 64).
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $fn$
-- Output columns share names with table columns: names in queries mean the columns.
#variable_conflict use_column
DECLARE
    v_win_ids  uuid[];
    v_win_ords integer[];
    v_workers  text[];
    v_units    integer[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.pools p WHERE p.pool_id = p_pool) THEN
        RAISE EXCEPTION 'pool % does not exist', p_pool USING ERRCODE = 'P0002';
    END IF;

    PERFORM 1 FROM {schema}.allocations a
      WHERE a.allocation_id = ANY (p_ids) AND (a.pool_id = p_pool) IS TRUE
      ORDER BY a.allocation_id
        FOR UPDATE;

    -- The winners: per id, the first item that may see its (locked, active) row and ends it.
    SELECT array_agg(w.id), array_agg(w.ord)
      INTO v_win_ids, v_win_ords
      FROM (SELECT DISTINCT ON (r.id) r.id, r.ord
              FROM unnest(p_ids, p_epochs, p_owners) WITH ORDINALITY AS r(id, sent, owner, ord)
              JOIN {schema}.allocations a ON a.allocation_id = r.id AND a.allocation_id = ANY (p_ids) AND (a.pool_id = p_pool) IS TRUE
             WHERE (r.owner IS NULL OR strpos(a.session_key, chr(31)) = 0 OR split_part(a.session_key, chr(31), 1) = r.owner)
               AND (a.expires_at <= now() OR a.epoch = r.sent)
             ORDER BY r.id, r.ord) w;

    -- End them: out of the hot table, into the history (docs/decisions/0012): released now, or
    -- (a lease that had expired) at its expiry, as the reaper would end it.
    WITH ended AS (
        DELETE FROM {schema}.allocations a
         WHERE a.allocation_id = ANY (v_win_ids) AND (a.pool_id = p_pool) IS TRUE
        RETURNING a.*
    ), moved AS (
        INSERT INTO {schema}.allocation_history
        SELECT e.allocation_id, e.pool_id, e.worker_id, e.address, e.session_key, e.units, e.epoch,
               e.created_at, e.expires_at,
               CASE WHEN e.expires_at <= now() THEN e.expires_at ELSE now() END,
               CASE WHEN e.expires_at <= now() THEN 'expired' ELSE 'released' END
          FROM ended e
        RETURNING 1
    )
    -- (moved runs whole whether or not it is read: PostgreSQL runs every data-modifying WITH.)
    SELECT array_agg(e.worker_id::text), array_agg(e.units) INTO v_workers, v_units
      FROM ended e;

    IF v_workers IS NOT NULL THEN
        -- Worker rows in worker_id order: an UPDATE ... FROM join has no defined lock order, so
        -- the locks are taken here first; the UPDATE then waits for nobody.
        PERFORM 1 FROM {schema}.workers w
          WHERE w.pool_id = p_pool AND w.worker_id = ANY (v_workers)
          ORDER BY w.worker_id
            FOR NO KEY UPDATE;
        UPDATE {schema}.workers w SET load = w.load - f.units
          FROM (SELECT x.worker_id, sum(x.units)::integer AS units
                  FROM unnest(v_workers, v_units) AS x(worker_id, units)
                 GROUP BY x.worker_id) f
         WHERE w.pool_id = p_pool AND w.worker_id = ANY (v_workers) AND w.worker_id = f.worker_id;
        PERFORM pg_notify(p_channel, p_pool || ':c');
    END IF;

    -- Every item's answer, from the rows as they are now: its winner's (ended) history row, the
    -- row still active (another epoch), a history row from before, or nothing it may see.
    RETURN QUERY
    SELECT (r.ord - 1)::integer,
           CASE WHEN v.stored IS NULL OR NOT (r.owner IS NULL OR strpos(v.stored, chr(31)) = 0 OR split_part(v.stored, chr(31), 1) = r.owner) THEN 'not_found'
                WHEN w.ord IS NOT NULL AND r.ord = w.ord THEN CASE WHEN h.end_reason = 'released' THEN 'released' ELSE 'not_active' END
                WHEN w.ord IS NOT NULL AND r.ord < w.ord THEN 'stale_epoch'
                WHEN a.allocation_id IS NOT NULL THEN 'stale_epoch'
                ELSE 'not_active' END,
           r.id, coalesce(a.worker_id, h.worker_id)::text, coalesce(a.address, h.address), v.stored,
           coalesce(a.units, h.units), coalesce(a.epoch, h.epoch), coalesce(a.created_at, h.created_at),
           coalesce(a.expires_at, h.expires_at), h.ended_at
      FROM unnest(p_ids, p_owners) WITH ORDINALITY AS r(id, owner, ord)
      LEFT JOIN unnest(v_win_ids, v_win_ords) AS w(id, ord) ON w.id = r.id
      LEFT JOIN {schema}.allocations a ON a.allocation_id = r.id AND a.allocation_id = ANY (p_ids) AND (a.pool_id = p_pool) IS TRUE
      -- The history by id alone, the pool checked after: OFFSET 0 keeps the two conditions apart.
      -- Together, a pool the statistics have not seen (estimated at one row) made the pool's
      -- prefix of the session index look as cheap as the primary key, and every release read
      -- all the rows its pool had ever ended (issue 24: 40,028 rows, 17 ms, at 50 million).
      LEFT JOIN LATERAL (SELECT x.* FROM {schema}.allocation_history x WHERE x.allocation_id = r.id OFFSET 0) h
             ON h.pool_id = p_pool
      CROSS JOIN LATERAL (SELECT coalesce(a.session_key, h.session_key) AS stored) v
     ORDER BY r.ord;
END
$fn$;
