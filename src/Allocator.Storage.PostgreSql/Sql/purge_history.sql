-- Forgets up to $2 ended allocations older than the retention ($1 ms): from then on a replay of
-- their keys may allocate again and their ids read as not found. Run after each reap. Oldest
-- first through allocation_history_ended_at (0009), so a batch reads only what it removes, however
-- large the history and however its pages were reused; SKIP LOCKED so concurrent purgers split
-- the rows instead of waiting for each other.
DELETE FROM {schema}.allocation_history h
 WHERE h.ctid = ANY (ARRAY(
       SELECT x.ctid FROM {schema}.allocation_history x
        WHERE x.ended_at < now() - $1 * interval '1 millisecond'
        ORDER BY x.ended_at
        LIMIT $2
          FOR UPDATE SKIP LOCKED));
