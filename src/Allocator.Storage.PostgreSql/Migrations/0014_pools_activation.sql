-- 0014: each pool's activation fence (issue 47, invariant 14).
--
-- A pool grain's activation claims its pool before its first allocation batch
-- (Sql/claim_pool_activation.sql), and the release of an allocation whose caller gave up carries
-- the activation's fence (Functions/release_abandoned.sql): an activation superseded while its
-- instance hung cannot end, when it wakes, an allocation its successor answered to a retry.
-- Expand-only: a column with a constant default (no rewrite, a brief ACCESS EXCLUSIVE on a small
-- table); the previous release neither reads nor writes it.
ALTER TABLE {schema}.pools ADD COLUMN IF NOT EXISTS activation bigint NOT NULL DEFAULT 0;
