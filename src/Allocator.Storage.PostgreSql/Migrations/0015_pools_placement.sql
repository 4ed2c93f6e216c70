-- 0015: each pool's placement (issue 49): 'spread' fills the least-loaded worker that fits first,
-- 'pack' the most-loaded. Read by allocate_batch from the pool's row, so every caller of the
-- function, of either release, places alike.
-- Expand-only: a column with a constant default (no rewrite, a brief ACCESS EXCLUSIVE on a small
-- table); the previous release neither reads nor writes it, and its upsert leaves it as it is.
ALTER TABLE {schema}.pools ADD COLUMN IF NOT EXISTS placement text NOT NULL DEFAULT 'spread';
ALTER TABLE {schema}.pools DROP CONSTRAINT IF EXISTS pools_placement_known;
ALTER TABLE {schema}.pools ADD CONSTRAINT pools_placement_known CHECK (placement IN ('spread', 'pack'));
