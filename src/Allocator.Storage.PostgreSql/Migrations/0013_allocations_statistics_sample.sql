-- 0013: the active allocations' statistics from a sample of 3,000 rows instead of 30,000 (issue 24).
--
-- As 0012 did for the history. Active allocations grow with the sessions a pool holds (a storm,
-- a morning of logins: wide-250 goes from none to 90,000 in 30 seconds), and the table's
-- autovacuum settings (0001) analyze it once 5% of it has changed: 25 times in that run, 125 ms of
-- CPU each at 90,000 rows against 13-19 ms with a target of 10. Every statement finds its
-- allocations by key, id, worker or expiry through an index whatever the estimates (findings 5,
-- 8 and 9 of docs/decisions/0024; ExplainTests builds statistics that saw the table empty and
-- checks each plan), so no plan waits on a finer histogram. A target of 10 keeps the ten most
-- common pools and a histogram of expiry.
--
-- Every column, so none samples more; a column added later must be given the same target
-- (MigrationTests checks it). SHARE UPDATE EXCLUSIVE, as in 0012: never waits for allocations.
DO $do$
DECLARE
    v_column name;
BEGIN
    FOR v_column IN
        SELECT a.attname FROM pg_attribute a
         WHERE a.attrelid = '{schema}.allocations'::regclass AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum
    LOOP
        EXECUTE format('ALTER TABLE {schema}.allocations ALTER COLUMN %I SET STATISTICS 10', v_column);
    END LOOP;
END
$do$;
