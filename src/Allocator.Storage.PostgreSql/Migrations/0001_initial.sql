-- 0001: pools, workers, allocations, and the allocation / registration functions.
-- {schema} is replaced by the validated, quoted schema name before this runs.

CREATE TABLE {schema}.pools (
    pool_id                 text COLLATE "C" PRIMARY KEY,
    strategy                text    NOT NULL DEFAULT 'skip-locked' CHECK (strategy IN ('skip-locked', 'strict')),
    default_lease_ms        bigint  NULL CHECK (default_lease_ms > 0),
    max_wait_ms             bigint  NOT NULL DEFAULT 0 CHECK (max_wait_ms >= 0),
    heartbeat_timeout_ms    bigint  NULL CHECK (heartbeat_timeout_ms > 0),
    serialize_registrations boolean NOT NULL DEFAULT false
);

-- fillfactor 70: leave room on each page so the frequent load updates can at least put the new
-- row version on the same page (fewer page splits and less heap bloat), even though they are
-- never HOT: every allocation changes score, which is indexed. Because of that every update
-- leaves a dead entry in the score index at the hot (least-loaded) end, where every allocation
-- scans; autovacuum is made aggressive (1% / 1000 rows, no cost delay) so those dead entries
-- are cleared in seconds, not after 20% of a small, hot table has turned over.
CREATE TABLE {schema}.workers (
    pool_id              text COLLATE "C" NOT NULL REFERENCES {schema}.pools (pool_id) ON DELETE CASCADE,
    -- "C" collation: ORDER BY worker_id must equal string.CompareOrdinal used by the in-memory store.
    worker_id            text COLLATE "C" NOT NULL,
    address              text    NOT NULL,
    capacity             integer NOT NULL CHECK (capacity > 0),
    load                 integer NOT NULL DEFAULT 0,
    reported_load_index  integer NULL CHECK (reported_load_index BETWEEN 0 AND 10000),
    state                text    NOT NULL DEFAULT 'available' CHECK (state IN ('available', 'draining', 'offline')),
    tags                 text[]  NOT NULL DEFAULT '{}',
    epoch                bigint  NOT NULL DEFAULT 1,
    last_heartbeat       timestamptz NOT NULL DEFAULT now(),
    -- Exactly Allocator.WorkerScore.Compute: stored so the selection index can order by it.
    score                bigint GENERATED ALWAYS AS (
                             greatest(load::bigint * 1000000000000 / capacity,
                                      coalesce(reported_load_index, 0)::bigint * 100000000)) STORED,
    PRIMARY KEY (pool_id, worker_id),
    -- Backstop for invariant 1; the functions never let it fire.
    CONSTRAINT workers_load_within_capacity CHECK (load >= 0 AND load <= capacity)
) WITH (fillfactor = 70,
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0,
        autovacuum_analyze_scale_factor = 0.05);

-- The selection index: WHERE pool_id = $1 AND state = 'available' ORDER BY score, worker_id
-- becomes an index seek that reads the least-loaded rows first (no sort over the pool).
-- Partial: draining/offline workers never enter the scan.
CREATE INDEX workers_pick ON {schema}.workers (pool_id, score, worker_id) WHERE state = 'available';

-- Fencing epochs of allocations: unique and increasing across the schema.
CREATE SEQUENCE {schema}.allocation_epoch;

-- No foreign key to workers: deregistration deletes the worker row, while its allocations stay
-- as history (ended with reason 'worker-deregistered') so a late release reports NotActive.
CREATE TABLE {schema}.allocations (
    allocation_id uuid PRIMARY KEY,
    pool_id       text COLLATE "C" NOT NULL,
    worker_id     text COLLATE "C" NOT NULL,
    address       text    NOT NULL,
    session_key   text    NOT NULL,
    units         integer NOT NULL CHECK (units > 0),
    epoch         bigint  NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NULL,
    ended_at      timestamptz NULL,
    end_reason    text    NULL
);

-- Idempotency (invariant 4): at most one active allocation per session key per pool. The
-- allocation function inserts with ON CONFLICT against it, so a race yields Existing, never a second row.
CREATE UNIQUE INDEX allocations_active_session ON {schema}.allocations (pool_id, session_key) WHERE ended_at IS NULL;

-- The reaper reads the oldest expired active allocations first.
CREATE INDEX allocations_expiry ON {schema}.allocations (expires_at) WHERE ended_at IS NULL AND expires_at IS NOT NULL;

-- Deregistration ends a worker's active allocations.
CREATE INDEX allocations_active_worker ON {schema}.allocations (pool_id, worker_id) WHERE ended_at IS NULL;

-- Allocates a batch of requests in one statement (one round trip, one commit when called in
-- autocommit). Each request picks with its own query, so it sees the batch's earlier picks
-- (water filling) and its own units and tags. p_skip = true: FOR NO KEY UPDATE SKIP LOCKED
-- (rows locked by others are passed over; status 'locked' when only locked rows had room).
-- p_skip = false: the blocking variant, waits for the true least-loaded row, bounded by
-- p_lock_timeout (set_config(..., true) lasts only for this statement's transaction).
-- FOR NO KEY UPDATE rather than FOR UPDATE: it does not conflict with the key-share locks
-- taken by foreign-key checks, and the load update never changes a key.
CREATE FUNCTION {schema}.allocate_batch(
    p_pool text, p_keys text[], p_units integer[], p_tags jsonb, p_lease_ms bigint[],
    p_skip boolean, p_lock_timeout text)
RETURNS TABLE (
    ord integer, status text, allocation_id uuid, worker_id text, address text, session_key text,
    units integer, epoch bigint, created_at timestamptz, expires_at timestamptz,
    rank integer, excess_score bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
-- Output columns share names with table columns: names in queries mean the columns.
#variable_conflict use_column
DECLARE
    v_pool   {schema}.pools;
    v_fresh  timestamptz;
    v_tags   text[];
    v_w      record;
    v_a      {schema}.allocations;
    v_lease  bigint;
    v_min    bigint;
    i        integer;
BEGIN
    SELECT * INTO v_pool FROM {schema}.pools p WHERE p.pool_id = p_pool;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool % does not exist', p_pool USING ERRCODE = 'P0002';
    END IF;
    IF NOT p_skip THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    v_fresh := CASE WHEN v_pool.heartbeat_timeout_ms IS NULL THEN '-infinity'::timestamptz
                    ELSE now() - v_pool.heartbeat_timeout_ms * interval '1 millisecond' END;

    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        ord := i - 1;
        rank := 0; excess_score := 0;
        -- Idempotency: an active allocation for the key (possibly made earlier in this batch).
        SELECT * INTO v_a FROM {schema}.allocations a
         WHERE a.pool_id = p_pool AND a.session_key = p_keys[i] AND a.ended_at IS NULL;
        IF FOUND THEN
            status := 'existing';
            allocation_id := v_a.allocation_id; worker_id := v_a.worker_id; address := v_a.address;
            session_key := v_a.session_key; units := v_a.units; epoch := v_a.epoch;
            created_at := v_a.created_at; expires_at := v_a.expires_at;
            RETURN NEXT;
            CONTINUE;
        END IF;

        v_tags := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_tags -> (i - 1), '[]'::jsonb)));
        IF p_skip THEN
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND w.tags @> v_tags
             ORDER BY w.score, w.worker_id
             LIMIT 1
             FOR NO KEY UPDATE SKIP LOCKED;
        ELSE
            SELECT w.worker_id, w.address, w.score INTO v_w FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND w.tags @> v_tags
             ORDER BY w.score, w.worker_id
             LIMIT 1
             FOR NO KEY UPDATE;
        END IF;

        IF NOT FOUND THEN
            -- Nothing unlocked had room: tell "merely locked" (retry, then block) from "full".
            status := CASE WHEN p_skip AND EXISTS (
                SELECT 1 FROM {schema}.workers w
                 WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
                   AND w.capacity - w.load >= p_units[i] AND w.tags @> v_tags)
                THEN 'locked' ELSE 'no_capacity' END;
            allocation_id := NULL; worker_id := NULL; address := NULL; session_key := p_keys[i];
            units := p_units[i]; epoch := NULL; created_at := NULL; expires_at := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- Decision telemetry (approximate, documented): rank = eligible rows ordered ahead of
        -- the pick in this statement's view, capped at 1000 to stay cheap; in the skip variant
        -- those are the rows that were locked and skipped.
        SELECT count(*)::integer, min(x.score) INTO rank, v_min FROM (
            SELECT w.score FROM {schema}.workers w
             WHERE w.pool_id = p_pool AND w.state = 'available' AND w.last_heartbeat >= v_fresh
               AND w.capacity - w.load >= p_units[i] AND w.tags @> v_tags
               AND (w.score, w.worker_id) < (v_w.score, v_w.worker_id)
             ORDER BY w.score, w.worker_id LIMIT 1000) x;
        excess_score := v_w.score - coalesce(v_min, v_w.score);

        UPDATE {schema}.workers w SET load = w.load + p_units[i]
         WHERE w.pool_id = p_pool AND w.worker_id = v_w.worker_id;

        v_lease := coalesce(p_lease_ms[i], v_pool.default_lease_ms);
        -- ON CONFLICT on the active-session index: a concurrent transaction that inserted the
        -- same key first wins; we undo our load change and return its allocation (no 23505 abort
        -- of the whole batch, no subtransaction per request).
        INSERT INTO {schema}.allocations AS a (allocation_id, pool_id, worker_id, address, session_key, units, epoch, created_at, expires_at)
        VALUES (gen_random_uuid(), p_pool, v_w.worker_id, v_w.address, p_keys[i], p_units[i],
                nextval('{schema}.allocation_epoch'), now(),
                CASE WHEN v_lease IS NULL THEN NULL ELSE now() + v_lease * interval '1 millisecond' END)
        ON CONFLICT (pool_id, session_key) WHERE ended_at IS NULL DO NOTHING
        RETURNING * INTO v_a;

        IF v_a.allocation_id IS NULL OR NOT FOUND THEN
            UPDATE {schema}.workers w SET load = w.load - p_units[i]
             WHERE w.pool_id = p_pool AND w.worker_id = v_w.worker_id;
            SELECT * INTO v_a FROM {schema}.allocations a
             WHERE a.pool_id = p_pool AND a.session_key = p_keys[i] AND a.ended_at IS NULL;
            status := 'existing'; rank := 0; excess_score := 0;
        ELSE
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

-- Deletes a worker and ends its active allocations. Two statements on purpose: the DELETE waits
-- for any allocation holding the worker's row lock; the UPDATE then runs with a fresh snapshot
-- (READ COMMITTED, volatile function) and so also ends an allocation that committed while the
-- DELETE waited. After the DELETE no allocation can land on the worker: allocators skip or
-- re-check the deleted row.
CREATE FUNCTION {schema}.deregister_worker(p_pool text, p_worker text)
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
