-- 0013: PostgreSQL analyzes its active allocations from a sample of 3,000 rows instead of 30,000
-- (issue 24), as 0012 did for its history. Here automatic statistics updates sample by the
-- table's size on their own (no per-column target to lower): nothing to change, only checked, so
-- both stores number their migrations alike.
IF OBJECT_ID(N'{schema}.allocations') IS NULL
    THROW 50500, N'{schema}.allocations is expected (migration 0001).', 1;
