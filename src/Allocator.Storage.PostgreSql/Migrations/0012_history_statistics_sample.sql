-- 0012: the history's statistics from a sample of 3,000 rows instead of 30,000 (issue 24).
--
-- ANALYZE reads 300 rows per unit of the largest statistics target of a table's columns: at the
-- default of 100, 30,000 rows, nearly every page of a history of a few hundred thousand rows and
-- 30,000 scattered pages of one of 50 million. Autovacuum analyzes a table once 10% of it has
-- changed, so a growing history (a new deployment, a load test) is analyzed over and over: 25
-- times in a 35-second loopback run, 150-180 ms of CPU each at 190,000 rows, about 7% of the
-- database's CPU per allocation. No statement depends on fine statistics of the history: every
-- lookup reads a key or an id through its index whatever the estimates (findings 4 and 10 of
-- docs/decisions/0024), and the purge reads oldest first through allocation_history_ended_at
-- with a LIMIT. A target of 10 keeps a histogram of ended_at and the most common pools.
--
-- Every column, so none samples more; a column added later must be given the same target
-- (MigrationTests checks it). ALTER TABLE ... SET STATISTICS takes a SHARE UPDATE EXCLUSIVE
-- lock: it waits for a running (auto)vacuum or analyze of the table, never for allocations or
-- releases, and holds them off not at all.
DO $do$
DECLARE
    v_column name;
BEGIN
    FOR v_column IN
        SELECT a.attname FROM pg_attribute a
         WHERE a.attrelid = '{schema}.allocation_history'::regclass AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum
    LOOP
        EXECUTE format('ALTER TABLE {schema}.allocation_history ALTER COLUMN %I SET STATISTICS 10', v_column);
    END LOOP;
END
$do$;
