-- 0014: each pool's activation fence (issue 47, invariant 14), as PostgreSQL's 0014: a pool grain's
-- activation claims its pool before its first allocation batch (claim_pool_activation.sql), and
-- the release of an allocation whose caller gave up carries the activation's fence
-- (release_batch.sql, @fence). Expand-only: a column with a constant default, which the previous
-- release neither reads nor writes.
IF COL_LENGTH(N'{schema}.pools', N'activation') IS NULL
    ALTER TABLE {schema}.pools ADD activation bigint NOT NULL CONSTRAINT df_pools_activation DEFAULT 0;
