-- Allocates a batch of requests in one statement (one round trip, one commit when called in
-- autocommit; docs/decisions/0001, 0002, 0009). p_skip = true: FOR NO KEY UPDATE SKIP LOCKED
-- (rows locked by others are passed over; status 'locked' when only locked rows had room).
-- p_skip = false: the blocking variant, waits for the true least-loaded row, bounded by
-- p_lock_timeout (set_config(..., true) lasts only for this statement's transaction).
-- FOR NO KEY UPDATE rather than FOR UPDATE: it does not conflict with the key-share locks
-- taken by foreign-key checks, and the load update never changes a key.
--
-- Two paths that decide alike. The set path serves the common batch (every request asks for
-- the same units and tags, distinct keys): one statement locks the least-loaded unlocked
-- candidates once, water-fills the requests over them, inserts every allocation and updates
-- every picked worker once (measured: ~0.2 ms of database CPU per allocation in the loop, five
-- statements per request; ~3-4 ms per batch of 64 in the set statement).
--
-- Why the n least-loaded unlocked rows are enough for n requests of u units: a worker outside
-- them starts with a (score, worker_id) above all of them, and scores only grow as units are
-- added, so it could be picked only after every one of the n had been picked at least once,
-- that is, not within n picks. Each candidate has room for at least u units, so the n
-- candidates hold at least n picks. Ordering the candidates' slots by the score each pick
-- would see, (score before the k-th pick, worker_id), gives exactly the picks the
-- request-by-request loop makes (water filling), so both paths decide alike.
--
-- Everything the set path does not serve falls through to the request-by-request loop: single
-- requests, mixed units or tags, keys repeated in the batch or already active, requests left when too few unlocked rows had room ('locked' / 'no_capacity'), and keys a
-- concurrent transaction inserted first (ON CONFLICT skipped them; the loop then finds the
-- winner's allocation and answers 'existing').
--
-- Idempotency (invariant 4, docs/decisions/0012): a key with an active allocation gets it back
-- ('existing'); a key whose allocation ended within p_retention_ms gets that ended allocation
-- back ('existing', ended_at set) and nothing is allocated. Ended allocations live in
-- allocation_history, outside the unique index of the hot table, so a release that commits while
-- this function's insert waits for it lets the insert through; a later statement (a fresh
-- snapshot) then finds the key in the history and undoes the insert.
--
-- Placement (issue 49): the pool's row says which eligible worker comes first. 'spread' (the
-- default) reads workers_pick from the least-loaded end, ORDER BY score, worker_id; 'pack' reads
-- the same index backwards, ORDER BY score DESC, worker_id DESC: the most-loaded worker that fits.
-- Everything else (eligibility, skipping locked rows, waiting only when all are locked,
-- idempotency, leases) is the same for both. Read here from the row, not passed in, so callers of
-- either release place alike during a rollout.
-- Why the n most-loaded unlocked rows are enough for n requests under 'pack': a pick never lowers
-- a worker's score, so the worker first in pack order stays first while it has room; the
-- request-by-request loop fills it, then the next, and n picks touch at most n workers. The set
-- path makes the same picks: each candidate's slots in pack order, the k-th slot of a candidate
-- after its k-1 earlier ones.
--
-- Leases (issue 20, #2): the request's (p_lease_ms), else the pool's default as this statement
-- reads it, else the caller's fallback (p_fallback_lease_ms, the grains' FallbackLease), else none.
-- The fallback used to be decided by the caller from settings it had read earlier, which it may
-- not know (a failed read) or know stale (a change being re-read): a pool with a 60 s default
-- then handed out 24-hour leases.
--
-- History lookups by key compare byte-wise (COLLATE "C"), so they use allocation_history_session_c
-- (migration 0006, issue 20 #7), whatever the column's collation.
-- Each reads the key's rows in a subquery fenced with OFFSET 0 and applies the retention cutoff and
-- the order outside it: given "ended_at > cutoff" or "ORDER BY ended_at", a planner that estimates
-- the history at one row (statistics taken after a purge emptied it: its pages there, its rows
-- not) read allocation_history_ended_at instead, every row ended within the retention once per
-- key (issue 24: 2,048,000 index entries for a batch of 64 over 32,000; ExplainTests). A key's
-- rows are few (the purge removes those past the retention), so the fence costs nothing.
--
-- The result columns changed (ended_at), which CREATE OR REPLACE cannot do: drop first.
DROP FUNCTION IF EXISTS {schema}.allocate_batch(text, text[], integer[], jsonb, bigint[], boolean, text);
-- The 8-parameter allocate_batch (before p_fallback_lease_ms) is left in place: during a rolling
-- upgrade the instances of the previous build still call it (docs/postgresql.md). A later
-- release drops it.
CREATE OR REPLACE FUNCTION {schema}.allocate_batch(
    p_pool text, p_keys text[], p_units integer[], p_tags jsonb, p_lease_ms bigint[],
    p_skip boolean, p_lock_timeout text, p_retention_ms bigint, p_fallback_lease_ms bigint[])
RETURNS TABLE (
    ord integer, status text, allocation_id uuid, worker_id text, address text, session_key text,
    units integer, epoch bigint, created_at timestamptz, expires_at timestamptz,
    rank integer, excess_score bigint, ended_at timestamptz)
-- jit = off: the planner's guesses for generate_series (1,000 rows per candidate) push the
-- set statement's estimated cost past jit_above_cost, and compiling it took ~650 ms (measured,
-- 100,000 workers) for a statement that runs in ~3 ms.
-- enable_seqscan = off: every read here has an index to go by, and a sequential read of the hot
-- tables is never cheaper than it. The planner thinks it is: it costs a read by the rows the
-- statistics last counted, and `allocations` (every row inserted, then deleted) and `workers`
-- (every update leaves a dead version) hold mostly dead row versions, each of which the read
-- must check. Planned by statistics that saw `allocations` small, the active-key probe read it
-- whole once per request (as release_batch's reads by id did), and both load updates read the
-- pool whole: about half of the two functions' CPU at batches of 64 (issue 24: 124 -> 67 us of
-- backend CPU per allocate + release step; ExplainTests holds the plans).
-- plan_cache_mode = force_generic_plan: left to choose, a backend that kept seeing batches of a
-- few requests planned the set statement anew on every call (a plan for those values looked
-- cheaper than the generic one): 38% of the backend's CPU at batches of two, and one allocate +
-- release of two took 2.3-2.4 ms instead of 1.3-1.4 ms (issue 24). The conditions above are
-- written for the generic plan (v_untagged, the LATERAL probes); ExplainTests checks it.
LANGUAGE plpgsql VOLATILE SET jit = off SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $fn$
-- Output columns share names with table columns: names in queries mean the columns.
#variable_conflict use_column
DECLARE
    v_pool   {schema}.pools;
    v_fresh  timestamptz;
    v_tags   text[];
    v_pack   boolean;
    -- The request asks for no tags (true for most). Written into the worker conditions as
    -- "(v_untagged OR w.tags @> v_tags)" for the planner, not for the result: the functions run
    -- generic plans, where "tags @> <unknown array>" is estimated to keep 0.5% of rows, so the
    -- candidate scan was estimated at one row and planned as a read and sort of the whole pool
    -- (1,000 rows, twice per batch: 0.9 ms of a 1.4 ms statement) instead of an ordered read of
    -- workers_pick that stops at the first n rows (0.5 ms statement). An unknown boolean is
    -- estimated at one half, which is enough for the ordered read to win.
    v_untagged boolean;
    v_w      record;
    v_first  record;
    v_a      {schema}.allocations;
    v_h      {schema}.allocation_history;
    v_r      record;
    v_cutoff timestamptz := now() - p_retention_ms * interval '1 millisecond';
    -- The set path's inserts, held back until the history check below.
    v_s_ord     integer[] := '{}';
    v_s_id      uuid[] := '{}';
    v_s_worker  text[] := '{}';
    v_s_address text[] := '{}';
    v_s_key     text[] := '{}';
    v_s_units   integer[] := '{}';
    v_s_epoch   bigint[] := '{}';
    v_s_created timestamptz[] := '{}';
    v_s_expires timestamptz[] := '{}';
    v_s_rank    integer[] := '{}';
    v_s_excess  bigint[] := '{}';
    v_ghosts    text[] := '{}';
    j        integer;
    v_lease  bigint;
    v_n      integer := coalesce(array_length(p_keys, 1), 0);
    v_picked text[] := '{}';
    v_units  integer[] := '{}';
    v_served boolean[] := array_fill(false, ARRAY[coalesce(array_length(p_keys, 1), 0)]);
    i        integer;
BEGIN
    SELECT * INTO v_pool FROM {schema}.pools p WHERE p.pool_id = p_pool;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool % does not exist', p_pool USING ERRCODE = 'P0002';
    END IF;
    IF NOT p_skip THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    v_pack := v_pool.placement = 'pack';
    v_fresh := CASE WHEN v_pool.heartbeat_timeout_ms IS NULL THEN '-infinity'::timestamptz
                    ELSE now() - v_pool.heartbeat_timeout_ms * interval '1 millisecond' END;

    -- The set path: skip-locked batches of two or more requests alike in units and tags, with
    -- distinct keys. (The blocking variant keeps the loop: it waits row by row on purpose.)
    IF p_skip AND v_n >= 2
       AND (SELECT count(DISTINCT u) FROM unnest(p_units) u) = 1
       AND (SELECT count(DISTINCT coalesce(p_tags -> g, '[]'::jsonb)) FROM generate_series(0, v_n - 1) g) = 1
       AND (SELECT count(DISTINCT k) FROM unnest(p_keys) k) = v_n
    THEN
        v_tags := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_tags -> 0, '[]'::jsonb)));
        v_untagged := cardinality(v_tags) = 0;

        IF NOT v_pack THEN
            FOR v_r IN
                WITH active AS (
                    -- Keys that already have an active allocation, probed one key at a time: the
                    -- LATERAL ... LIMIT 1 can only run as a lookup of (pool_id, session_key) on the
                    -- active-session index. Written as "session_key = ANY (p_keys)" the generic plan
                    -- applied the keys as a filter over every active allocation of the pool (29,561
                    -- rows, 39 ms of a 45 ms statement in wide-250, auto_explain), because a pool the
                    -- statistics have not seen yet is estimated at one row.
                    SELECT r.key AS session_key
                      FROM unnest(p_keys) AS r(key)
                     CROSS JOIN LATERAL (SELECT 1 FROM {schema}.allocations a
                                          WHERE a.pool_id = p_pool AND a.session_key = r.key
                                          LIMIT 1) hit
                ), wanted AS (
                    -- Requests whose key has no active allocation, numbered in request order.
                    SELECT r.ord::integer AS ord, r.key, row_number() OVER (ORDER BY r.ord) AS n
                      FROM unnest(p_keys) WITH ORDINALITY AS r(key, ord)
                     WHERE r.key NOT IN (SELECT x.session_key FROM active x)
                ), candidates AS MATERIALIZED (
                    SELECT w.worker_id, w.address, w.capacity, w.load, w.reported_load_index, w.score
                      FROM {schema}.workers w
                     WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                       AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                     ORDER BY w.score, w.worker_id
                     LIMIT v_n
                     FOR NO KEY UPDATE SKIP LOCKED
                ), skipped AS MATERIALIZED (
                    -- Decision telemetry (approximate, as in the loop): eligible rows ahead of the
                    -- least-loaded candidate were locked by others and passed over. Usually none:
                    -- one ordered read shows it. Only otherwise are they counted, reading at most
                    -- 1,000 rows in index order (a row comparison bound would not stop the scan
                    -- inside a run of equal scores, which is most of an idle pool). MATERIALIZED: read
                    -- once per batch, not once per output row.
                    SELECT CASE WHEN f.worker_id IS NULL OR l.worker_id IS NULL
                                     OR (f.score, f.worker_id) >= (l.score, l.worker_id) THEN 0
                                ELSE (SELECT count(*)::integer FROM (
                                          SELECT w.score, w.worker_id FROM {schema}.workers w
                                           WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                                             AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                                           ORDER BY w.score, w.worker_id LIMIT 1000) x
                                       WHERE (x.score, x.worker_id) < (l.score, l.worker_id)) END AS rows,
                           f.score AS least
                      FROM (SELECT 1) one
                      LEFT JOIN (SELECT w.score, w.worker_id FROM {schema}.workers w
                                  WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                                    AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                                  ORDER BY w.score, w.worker_id LIMIT 1) f ON true
                      LEFT JOIN (SELECT c.score, c.worker_id FROM candidates c ORDER BY c.score, c.worker_id LIMIT 1) l ON true
                ), slots AS (
                    -- The k-th further pick of a candidate sees this score (WorkerScore.Compute).
                    -- The n picks never score above the highest candidate's score M (the n
                    -- candidates' first slots already score <= M), so only slots scoring <= M are
                    -- generated: (load + k*units) * 10^12 / capacity <= M. With equal loads that is
                    -- one slot per candidate, not n.
                    SELECT c.worker_id, c.address,
                           greatest((c.load + k * p_units[1])::bigint * 1000000000000 / c.capacity,
                                    coalesce(c.reported_load_index, 0)::bigint * 100000000) AS score
                      FROM candidates c
                     CROSS JOIN (SELECT max(c2.score) AS top FROM candidates c2) m
                     CROSS JOIN LATERAL generate_series(0, least(
                               (((m.top + 1) * c.capacity - 1) / 1000000000000 - c.load) / p_units[1],
                               (c.capacity - c.load) / p_units[1] - 1,
                               v_n - 1)) k
                ), picks AS (
                    SELECT s.worker_id, s.address, s.score, row_number() OVER (ORDER BY s.score, s.worker_id) AS n
                      FROM slots s
                     ORDER BY s.score, s.worker_id
                     LIMIT v_n
                ), inserted AS (
                    INSERT INTO {schema}.allocations AS a (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
                    SELECT {schema}.uuid_v7(), p_pool, p.worker_id, p.address, q.key, p_units[q.ord],
                           nextval('{schema}.allocation_epoch'), now(),
                           CASE WHEN coalesce(p_lease_ms[q.ord], v_pool.default_lease_ms, p_fallback_lease_ms[q.ord]) IS NULL THEN NULL
                                ELSE now() + coalesce(p_lease_ms[q.ord], v_pool.default_lease_ms, p_fallback_lease_ms[q.ord]) * interval '1 millisecond' END
                      FROM wanted q JOIN picks p ON p.n = q.n
                     ORDER BY q.n
                    ON CONFLICT (pool_id, session_key) DO NOTHING
                    RETURNING a.*
                )
                SELECT (q.ord - 1)::integer AS ord, i.allocation_id, i.worker_id, i.address, i.session_key, i.units,
                       i.epoch, i.created_at, i.expires_at, k.rows AS rank,
                       CASE WHEN k.rows > 0 THEN greatest(p.score - k.least, 0) ELSE 0 END AS excess
                  FROM inserted i CROSS JOIN skipped k
                  JOIN wanted q ON q.key = i.session_key
                  JOIN picks p ON p.n = q.n
            LOOP
                v_s_ord := v_s_ord || v_r.ord; v_s_id := v_s_id || v_r.allocation_id;
                v_s_worker := v_s_worker || v_r.worker_id::text; v_s_address := v_s_address || v_r.address;
                v_s_key := v_s_key || v_r.session_key; v_s_units := v_s_units || v_r.units;
                v_s_epoch := v_s_epoch || v_r.epoch; v_s_created := v_s_created || v_r.created_at;
                v_s_expires := v_s_expires || v_r.expires_at; v_s_rank := v_s_rank || v_r.rank;
                v_s_excess := v_s_excess || v_r.excess;
            END LOOP;
        ELSE
            -- 'pack': the same shape in pack order (see the header). Each candidate's slots are its
            -- room in requests of p_units[1], in pack order; no water filling: the first candidate is
            -- filled before the next is touched.
            FOR v_r IN
                WITH active AS (
                    SELECT r.key AS session_key
                      FROM unnest(p_keys) AS r(key)
                     CROSS JOIN LATERAL (SELECT 1 FROM {schema}.allocations a
                                          WHERE a.pool_id = p_pool AND a.session_key = r.key
                                          LIMIT 1) hit
                ), wanted AS (
                    SELECT r.ord::integer AS ord, r.key, row_number() OVER (ORDER BY r.ord) AS n
                      FROM unnest(p_keys) WITH ORDINALITY AS r(key, ord)
                     WHERE r.key NOT IN (SELECT x.session_key FROM active x)
                ), candidates AS MATERIALIZED (
                    SELECT w.worker_id, w.address, w.capacity, w.load, w.score
                      FROM {schema}.workers w
                     WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                       AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                     ORDER BY w.score DESC, w.worker_id DESC
                     LIMIT v_n
                     FOR NO KEY UPDATE SKIP LOCKED
                ), skipped AS MATERIALIZED (
                    -- As the spread statement's, in pack order: eligible rows ahead of the first
                    -- candidate (fuller than it) were locked by others and passed over.
                    SELECT CASE WHEN f.worker_id IS NULL OR l.worker_id IS NULL
                                     OR (f.score, f.worker_id) <= (l.score, l.worker_id) THEN 0
                                ELSE (SELECT count(*)::integer FROM (
                                          SELECT w.score, w.worker_id FROM {schema}.workers w
                                           WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                                             AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                                           ORDER BY w.score DESC, w.worker_id DESC LIMIT 1000) x
                                       WHERE (x.score, x.worker_id) > (l.score, l.worker_id)) END AS rows,
                           f.score AS best
                      FROM (SELECT 1) one
                      LEFT JOIN (SELECT w.score, w.worker_id FROM {schema}.workers w
                                  WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                                    AND w.capacity - w.load >= p_units[1] AND (v_untagged OR w.tags @> v_tags)
                                  ORDER BY w.score DESC, w.worker_id DESC LIMIT 1) f ON true
                      LEFT JOIN (SELECT c.score, c.worker_id FROM candidates c ORDER BY c.score DESC, c.worker_id DESC LIMIT 1) l ON true
                ), picks AS (
                    SELECT s.worker_id, s.address, s.score, s.n
                      FROM (SELECT c.worker_id, c.address, c.score,
                                   row_number() OVER (ORDER BY c.score DESC, c.worker_id DESC, k) AS n
                              FROM candidates c
                             CROSS JOIN LATERAL generate_series(0, least((c.capacity - c.load) / p_units[1] - 1, v_n - 1)) k) s
                     WHERE s.n <= v_n
                ), inserted AS (
                    INSERT INTO {schema}.allocations AS a (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
                    SELECT {schema}.uuid_v7(), p_pool, p.worker_id, p.address, q.key, p_units[q.ord],
                           nextval('{schema}.allocation_epoch'), now(),
                           CASE WHEN coalesce(p_lease_ms[q.ord], v_pool.default_lease_ms, p_fallback_lease_ms[q.ord]) IS NULL THEN NULL
                                ELSE now() + coalesce(p_lease_ms[q.ord], v_pool.default_lease_ms, p_fallback_lease_ms[q.ord]) * interval '1 millisecond' END
                      FROM wanted q JOIN picks p ON p.n = q.n
                     ORDER BY q.n
                    ON CONFLICT (pool_id, session_key) DO NOTHING
                    RETURNING a.*
                )
                SELECT (q.ord - 1)::integer AS ord, i.allocation_id, i.worker_id, i.address, i.session_key, i.units,
                       i.epoch, i.created_at, i.expires_at, k.rows AS rank,
                       CASE WHEN k.rows > 0 THEN greatest(k.best - p.score, 0) ELSE 0 END AS excess
                  FROM inserted i CROSS JOIN skipped k
                  JOIN wanted q ON q.key = i.session_key
                  JOIN picks p ON p.n = q.n
            LOOP
                v_s_ord := v_s_ord || v_r.ord; v_s_id := v_s_id || v_r.allocation_id;
                v_s_worker := v_s_worker || v_r.worker_id::text; v_s_address := v_s_address || v_r.address;
                v_s_key := v_s_key || v_r.session_key; v_s_units := v_s_units || v_r.units;
                v_s_epoch := v_s_epoch || v_r.epoch; v_s_created := v_s_created || v_r.created_at;
                v_s_expires := v_s_expires || v_r.expires_at; v_s_rank := v_s_rank || v_r.rank;
                v_s_excess := v_s_excess || v_r.excess;
            END LOOP;
        END IF;

        -- Keys with an outcome in the history (released within the retention, possibly by a
        -- transaction that committed while the insert above waited for it): a fresh statement
        -- sees them. Undo those inserts; the loop below answers them from the history. One
        -- lookup per key (LATERAL ... LIMIT 1, as the active probe above); usually finds none.
        v_ghosts := ARRAY(
            SELECT r.key FROM unnest(v_s_key) AS r(key)
             CROSS JOIN LATERAL (SELECT 1 FROM (SELECT x.ended_at FROM {schema}.allocation_history x
                                                 WHERE x.pool_id = p_pool AND x.session_key = r.key COLLATE "C" OFFSET 0) h
                                  WHERE h.ended_at > v_cutoff LIMIT 1) hit);
        IF cardinality(v_ghosts) > 0 THEN
            DELETE FROM {schema}.allocations a
             WHERE a.pool_id = p_pool AND a.allocation_id = ANY (v_s_id) AND a.session_key = ANY (v_ghosts);
        END IF;

        ended_at := NULL;
        FOR j IN 1 .. coalesce(array_length(v_s_id, 1), 0) LOOP
            CONTINUE WHEN v_s_key[j] = ANY (v_ghosts);
            ord := v_s_ord[j]; status := 'allocated';
            allocation_id := v_s_id[j]; worker_id := v_s_worker[j]; address := v_s_address[j];
            session_key := v_s_key[j]; units := v_s_units[j]; epoch := v_s_epoch[j];
            created_at := v_s_created[j]; expires_at := v_s_expires[j];
            rank := v_s_rank[j]; excess_score := v_s_excess[j];
            v_served[v_s_ord[j] + 1] := true;
            v_picked := v_picked || v_s_worker[j];
            v_units := v_units || v_s_units[j];
            RETURN NEXT;
        END LOOP;

        -- Only inserted rows add load (a key lost to a concurrent insert adds nothing). A
        -- statement of its own; the rows are already locked by this transaction. The units are
        -- summed per worker once (as release_batch does), not once per updated row: 0.86 -> 0.6 ms
        -- for a batch of 64 on a pool of 1,000 (auto_explain). "worker_id = ANY" keeps the read
        -- on the primary key: joined on worker_id alone, the planner read the whole pool and
        -- hashed it, every page of it with every dead row version the load updates leave behind
        -- (271 pages for 1,000 workers; a third of the function's time, issue 24).
        UPDATE {schema}.workers w SET load = w.load + f.units
          FROM (SELECT x.worker_id, sum(x.units)::integer AS units
                  FROM unnest(v_picked, v_units) AS x(worker_id, units)
                 GROUP BY x.worker_id) f
         WHERE w.pool_id = p_pool AND w.worker_id = ANY (v_picked) AND w.worker_id = f.worker_id;
    END IF;

    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_served[i];
        ord := i - 1;
        rank := 0; excess_score := 0; ended_at := NULL;
        -- Idempotency: an active allocation for the key (possibly made earlier in this batch).
        SELECT * INTO v_a FROM {schema}.allocations a
         WHERE a.pool_id = p_pool AND a.session_key = p_keys[i];
        IF FOUND THEN
            status := 'existing';
            allocation_id := v_a.allocation_id; worker_id := v_a.worker_id; address := v_a.address;
            session_key := v_a.session_key; units := v_a.units; epoch := v_a.epoch;
            created_at := v_a.created_at; expires_at := v_a.expires_at;
            -- A lease that has expired (by this statement's clock) is over even before the
            -- reaper moves it: never answered as live (#5).
            IF v_a.expires_at <= now() THEN
                ended_at := v_a.expires_at;
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- ... or one that ended within the retention: its outcome, never a second allocation.
        SELECT * INTO v_h FROM (SELECT x.* FROM {schema}.allocation_history x
                                 WHERE x.pool_id = p_pool AND x.session_key = p_keys[i] COLLATE "C" OFFSET 0) h
         WHERE h.ended_at > v_cutoff ORDER BY h.ended_at DESC LIMIT 1;
        IF FOUND THEN
            status := 'existing';
            allocation_id := v_h.allocation_id; worker_id := v_h.worker_id; address := v_h.address;
            session_key := v_h.session_key; units := v_h.units; epoch := v_h.epoch;
            created_at := v_h.created_at; expires_at := v_h.expires_at; ended_at := v_h.ended_at;
            RETURN NEXT;
            CONTINUE;
        END IF;

        v_tags := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_tags -> (i - 1), '[]'::jsonb)));
        v_untagged := cardinality(v_tags) = 0;
        IF p_skip AND v_pack THEN
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score DESC, w.worker_id DESC
             LIMIT 1
             FOR NO KEY UPDATE SKIP LOCKED;
        ELSIF p_skip THEN
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score, w.worker_id
             LIMIT 1
             FOR NO KEY UPDATE SKIP LOCKED;
        ELSIF v_pack THEN
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score DESC, w.worker_id DESC
             LIMIT 1
             FOR NO KEY UPDATE;
        ELSE
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score, w.worker_id
             LIMIT 1
             FOR NO KEY UPDATE;
        END IF;

        IF NOT FOUND THEN
            -- Nothing unlocked had room: tell "merely locked" (retry, then block) from "full".
            status := CASE WHEN p_skip AND EXISTS (
                SELECT 1 FROM {schema}.workers w
                 WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                   AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags))
                THEN 'locked' ELSE 'no_capacity' END;
            allocation_id := NULL; worker_id := NULL; address := NULL; session_key := p_keys[i];
            units := p_units[i]; epoch := NULL; created_at := NULL; expires_at := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- Decision telemetry (approximate, documented): rank = eligible rows ordered ahead of
        -- the pick in this statement's view; in the skip variant those are the rows that were
        -- locked and skipped. Usually none, which one ordered read shows; otherwise counted
        -- over at most 1,000 rows in index order (see the set path for why not a row bound).
        IF v_pack THEN
            SELECT w.score, w.worker_id INTO v_first FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score DESC, w.worker_id DESC LIMIT 1;
        ELSE
            SELECT w.score, w.worker_id INTO v_first FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
             ORDER BY w.score, w.worker_id LIMIT 1;
        END IF;
        IF NOT FOUND OR (NOT v_pack AND (v_first.score, v_first.worker_id) >= (v_w.score, v_w.worker_id))
           OR (v_pack AND (v_first.score, v_first.worker_id) <= (v_w.score, v_w.worker_id)) THEN
            rank := 0;
            excess_score := 0;
        ELSIF v_pack THEN
            SELECT count(*)::integer INTO rank FROM (
                SELECT w.score, w.worker_id FROM {schema}.workers w
                 WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                   AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
                 ORDER BY w.score DESC, w.worker_id DESC LIMIT 1000) x
             WHERE (x.score, x.worker_id) > (v_w.score, v_w.worker_id);
            excess_score := v_first.score - v_w.score;
        ELSE
            SELECT count(*)::integer INTO rank FROM (
                SELECT w.score, w.worker_id FROM {schema}.workers w
                 WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                   AND w.capacity - w.load >= p_units[i] AND (v_untagged OR w.tags @> v_tags)
                 ORDER BY w.score, w.worker_id LIMIT 1000) x
             WHERE (x.score, x.worker_id) < (v_w.score, v_w.worker_id);
            excess_score := v_w.score - v_first.score;
        END IF;

        UPDATE {schema}.workers w SET load = w.load + p_units[i]
         WHERE w.pool_id = p_pool AND w.worker_id = v_w.worker_id;

        v_lease := coalesce(p_lease_ms[i], v_pool.default_lease_ms, p_fallback_lease_ms[i]);
        -- ON CONFLICT on the active-session index: a concurrent transaction that inserted the
        -- same key first wins; we undo our load change and return its allocation (no 23505 abort
        -- of the whole batch, no subtransaction per request).
        INSERT INTO {schema}.allocations AS a (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
        VALUES ({schema}.uuid_v7(), p_pool, v_w.worker_id, v_w.address, p_keys[i], p_units[i],
                nextval('{schema}.allocation_epoch'), now(),
                CASE WHEN v_lease IS NULL THEN NULL ELSE now() + v_lease * interval '1 millisecond' END)
        ON CONFLICT (pool_id, session_key) DO NOTHING
        RETURNING * INTO v_a;

        IF v_a.allocation_id IS NULL OR NOT FOUND THEN
            UPDATE {schema}.workers w SET load = w.load - p_units[i]
             WHERE w.pool_id = p_pool AND w.worker_id = v_w.worker_id;
            SELECT * INTO v_a FROM {schema}.allocations a
             WHERE a.pool_id = p_pool AND a.session_key = p_keys[i];
            status := 'existing'; rank := 0; excess_score := 0;
            IF NOT FOUND THEN
                -- The allocation that won the key has ended since (#10: this read used to come
                -- back empty and answer 'existing' with a NULL id): its outcome is in the history.
                SELECT * INTO v_h FROM (SELECT x.* FROM {schema}.allocation_history x
                                         WHERE x.pool_id = p_pool AND x.session_key = p_keys[i] COLLATE "C" OFFSET 0) h
                 WHERE h.ended_at > v_cutoff ORDER BY h.ended_at DESC LIMIT 1;
                IF FOUND THEN
                    allocation_id := v_h.allocation_id; worker_id := v_h.worker_id; address := v_h.address;
                    session_key := v_h.session_key; units := v_h.units; epoch := v_h.epoch;
                    created_at := v_h.created_at; expires_at := v_h.expires_at; ended_at := v_h.ended_at;
                ELSE
                    -- Nowhere (it rolled back, or was purged): nothing was decided for this key;
                    -- the caller runs it again in a fresh statement.
                    status := 'locked';
                    allocation_id := NULL; worker_id := NULL; address := NULL; session_key := p_keys[i];
                    units := p_units[i]; epoch := NULL; created_at := NULL; expires_at := NULL;
                END IF;
                RETURN NEXT;
                v_a := NULL;
                CONTINUE;
            END IF;
        ELSE
            -- A release of this key that committed while the insert waited (see the set path):
            -- a fresh statement sees it in the history. Undo; answer its outcome.
            SELECT * INTO v_h FROM (SELECT x.* FROM {schema}.allocation_history x
                                     WHERE x.pool_id = p_pool AND x.session_key = p_keys[i] COLLATE "C" OFFSET 0) h
             WHERE h.ended_at > v_cutoff ORDER BY h.ended_at DESC LIMIT 1;
            IF FOUND THEN
                DELETE FROM {schema}.allocations a WHERE a.allocation_id = v_a.allocation_id;
                UPDATE {schema}.workers w SET load = w.load - p_units[i]
                 WHERE w.pool_id = p_pool AND w.worker_id = v_w.worker_id;
                status := 'existing'; rank := 0; excess_score := 0;
                allocation_id := v_h.allocation_id; worker_id := v_h.worker_id; address := v_h.address;
                session_key := v_h.session_key; units := v_h.units; epoch := v_h.epoch;
                created_at := v_h.created_at; expires_at := v_h.expires_at; ended_at := v_h.ended_at;
                RETURN NEXT;
                v_a := NULL;
                CONTINUE;
            END IF;
            status := 'allocated';
        END IF;
        allocation_id := v_a.allocation_id; worker_id := v_a.worker_id; address := v_a.address;
        session_key := v_a.session_key; units := v_a.units; epoch := v_a.epoch;
        created_at := v_a.created_at; expires_at := v_a.expires_at;
        RETURN NEXT;
        v_a := NULL;
    END LOOP;
END
$fn$;
