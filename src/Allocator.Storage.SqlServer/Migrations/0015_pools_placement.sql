-- 0015: each pool's placement (issue 49), as PostgreSQL's 0015: 0 spread (the least-loaded worker
-- that fits first), 1 pack (the most-loaded). Read by allocate_skip_locked.sql and
-- allocate_blocking.sql from the pool's row. Expand-only: a column with a constant default, which
-- the previous release neither reads nor writes (its upsert leaves it as it is).
IF COL_LENGTH(N'{schema}.pools', N'placement') IS NULL
    ALTER TABLE {schema}.pools ADD placement tinyint NOT NULL CONSTRAINT df_pools_placement DEFAULT 0
        CONSTRAINT ck_pools_placement CHECK (placement IN (0, 1));
