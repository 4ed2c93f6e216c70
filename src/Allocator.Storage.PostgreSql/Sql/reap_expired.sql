-- Ends up to $1 expired allocations (database clock), each at its expiry (as every read answered
-- it since, issue 20 #5), of pool $3 or of every pool when $3 is
-- NULL (an allocation that found no capacity reaps its own pool first: an expired lease holds
-- no capacity, #5): moves them to the history ('expired') and
-- frees their units. FOR UPDATE SKIP LOCKED: concurrent reapers (and a racing release) take
-- disjoint rows, so an allocation is ended, and its units freed, exactly once. Uses
-- allocations_expiry.
WITH expired AS (
    SELECT a.allocation_id FROM {schema}.allocations a
     WHERE a.expires_at <= now() AND ($3::text IS NULL OR a.pool_id = $3::text)
     ORDER BY a.expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), ended AS (
    -- The ids as an array, not a join: with statistics that counted `allocations` empty (after a
    -- quiet night) the join was planned as a merge over a whole read of the primary key (issue 24,
    -- ExplainTests: 2,000 rows to end 10).
    DELETE FROM {schema}.allocations a
     WHERE a.allocation_id = ANY (ARRAY(SELECT x.allocation_id FROM expired x))
    RETURNING a.*
), history AS (
    INSERT INTO {schema}.allocation_history
    SELECT e.allocation_id, e.pool_id, e.worker_id, e.address, e.session_key, e.units, e.epoch,
           e.created_at, e.expires_at, e.expires_at, 'expired'
      FROM ended e
    RETURNING *
), per_worker AS (
    SELECT e.pool_id, e.worker_id, sum(e.units)::integer AS units FROM ended e GROUP BY 1, 2
), locked AS MATERIALIZED (
    -- Worker rows in (pool_id, worker_id) order, as release_batch and registration take them: an
    -- UPDATE ... FROM locks in whatever order its join reads, and two reapers (or a reaper and a
    -- release batch) then deadlocked (#9).
    SELECT w.pool_id, w.worker_id FROM {schema}.workers w
      JOIN per_worker p ON w.pool_id = p.pool_id AND w.worker_id = p.worker_id
     ORDER BY w.pool_id, w.worker_id
       FOR NO KEY UPDATE OF w
), freed AS (
    -- One update per worker (sum of units), so a worker with two expired allocations is updated once.
    UPDATE {schema}.workers w SET load = w.load - p.units
      FROM per_worker p JOIN locked l ON l.pool_id = p.pool_id AND l.worker_id = p.worker_id
     WHERE w.pool_id = p.pool_id AND w.worker_id = p.worker_id
    RETURNING w.pool_id
), notified AS (
    SELECT pg_notify($2, d.pool_id || ':c') FROM (SELECT DISTINCT pool_id FROM freed) d
)
SELECT h.allocation_id, h.pool_id::text, h.worker_id::text, h.address, h.session_key, h.units, h.epoch,
       h.created_at, h.expires_at, h.ended_at, (SELECT count(*) FROM notified) AS _n
  FROM history h;
