-- allocator:no-transaction
-- 0010: drops the history's default-collation session index (issue 24). Since 0006 every lookup
-- of a key in the history compares byte-wise and goes through allocation_history_session_c; the
-- old index served only the build before issue 20 during a rolling upgrade, and cost every release
-- one more index insert (and 5.4 GB at 50 million rows). Upgrading from a build older than issue
-- 20 goes through a build with 0006-0009 first (docs/postgresql.md, "Upgrades"): that build's
-- instances would otherwise find ended keys by reading the whole history.
-- Concurrently, so releases are not held off while it goes.
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_session;
