-- 0002: active allocations in a small hot table; ended ones in allocation_history.
--
-- allocations kept every ended allocation: after ten minutes of the sustained workload it held
-- 2.6 million rows (a 426 MB heap, a 41 MB primary key) for about 64 live ones, and every release
-- was a non-HOT update leaving a dead tuple in a table whose vacuum cost grew with its history.
-- Now a release, an expiry or a deregistration deletes the row from allocations and inserts it
-- into allocation_history (docs/decisions/0012): allocations holds only what is live, so it stays
-- as small as the number of active allocations and vacuum stays cheap; the history is
-- append-only (inserts, then purged in time order after HistoryRetention) and answers
-- idempotent replays of ended keys and reads of ended allocations.

CREATE TABLE {schema}.allocation_history (
    allocation_id uuid PRIMARY KEY,
    pool_id       text COLLATE "C" NOT NULL,
    worker_id     text COLLATE "C" NOT NULL,
    address       text    NOT NULL,
    session_key   text    NOT NULL,
    units         integer NOT NULL,
    epoch         bigint  NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NULL,
    ended_at      timestamptz NOT NULL,
    end_reason    text    NOT NULL CHECK (end_reason IN ('released', 'expired', 'worker-deregistered'))
) WITH (fillfactor = 100,
        -- Insert-only between purges: vacuum only to set visibility bits and freeze, rarely and
        -- in the background; the purge's deletes are what it cleans up.
        autovacuum_vacuum_insert_scale_factor = 0.2,
        autovacuum_vacuum_scale_factor = 0.1,
        autovacuum_analyze_scale_factor = 0.05);

INSERT INTO {schema}.allocation_history
SELECT a.allocation_id, a.pool_id, a.worker_id, a.address, a.session_key, a.units, a.epoch,
       a.created_at, a.expires_at, a.ended_at, coalesce(a.end_reason, 'released')
  FROM {schema}.allocations a
 WHERE a.ended_at IS NOT NULL;

DELETE FROM {schema}.allocations a WHERE a.ended_at IS NOT NULL;

-- Every row is active now: plain (not partial) indexes.
DROP INDEX {schema}.allocations_active_session;
DROP INDEX {schema}.allocations_expiry;
DROP INDEX {schema}.allocations_active_worker;
ALTER TABLE {schema}.allocations DROP COLUMN ended_at, DROP COLUMN end_reason;

-- Idempotency (invariant 4): one active allocation per session key per pool; allocate_batch
-- inserts with ON CONFLICT against it. Ended keys are answered from allocation_history.
CREATE UNIQUE INDEX allocations_session ON {schema}.allocations (pool_id, session_key);

-- The reaper reads the oldest expired allocations first.
CREATE INDEX allocations_expiry ON {schema}.allocations (expires_at) WHERE expires_at IS NOT NULL;

-- Deregistration ends a worker's allocations. Led by worker_id so the planner can never use it
-- for a pool-only condition (see 0001).
CREATE INDEX allocations_worker ON {schema}.allocations (worker_id, pool_id);

-- The hot table: every allocation inserts a row and every release deletes one, so dead tuples
-- arrive at the allocation rate while live ones stay few. Vacuum it as often as the workers
-- table (each run is cheap on a small table) so its indexes do not fill with dead entries.
ALTER TABLE {schema}.allocations SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05);
