-- 0001: the baseline schema (tables, sequences, indexes). Functions live in Functions/*.sql and
-- are applied by the migrator whenever their text changes; this file holds schema only.
-- Squashed from the pre-release migrations 0001-0005 (no database had to be upgraded).
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

-- Deregistration ends a worker's active allocations. Led by worker_id on purpose: led by pool_id,
-- the planner could pick it for allocate_batch's check of which session keys are active
-- (pool_id = $1 AND session_key = ...) on a pool it has no statistics for (estimated at one
-- row), and scanned every active allocation of the pool (183 ms of a 190 ms batch statement in
-- wide-250, auto_explain). Led by worker_id it cannot serve a pool-only condition.
CREATE INDEX allocations_active_worker ON {schema}.allocations (worker_id, pool_id) WHERE ended_at IS NULL;
