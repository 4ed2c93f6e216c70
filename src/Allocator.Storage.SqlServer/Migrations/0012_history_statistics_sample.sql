-- 0012: PostgreSQL analyzes its history from a sample of 3,000 rows instead of 30,000 (issue 24):
-- ANALYZE's sample is 300 rows per unit of a column's statistics target, and a growing history
-- was analyzed over and over at the default's cost. Here the ended allocations stay in the
-- allocations table, and automatic statistics updates sample by the table's size on their own
-- (no per-column target to lower): nothing to change, only checked, so both stores number their
-- migrations alike.
IF OBJECT_ID(N'{schema}.allocations') IS NULL
    THROW 50500, N'{schema}.allocations is expected (migration 0001).', 1;
