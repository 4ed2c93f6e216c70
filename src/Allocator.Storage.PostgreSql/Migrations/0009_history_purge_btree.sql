-- allocator:no-transaction
-- 0009: the purge finds old history through a btree on ended_at instead of a BRIN index (issue 24).
--
-- BRIN kept one min/max per range of 128 pages, and a summary only ever widens: deleting rows does
-- not narrow it, and once vacuum has freed the purged pages new rows (ended now) land there, so
-- the range reads as "from a day ago until now". Every range the purge ever emptied then matches
-- its condition, and each batch of the purge rereads them all: measured at 480,000 rows, the rows
-- rechecked per batch grew by one hour of history per hour of purging (0, 19,999, 39,999, 59,999),
-- and at 50 million rows a day of purging would reread the whole table for every batch (figures:
-- docs/benchmarks.md, "History at scale"). A btree entry per ended row costs an insert at the
-- right edge of the index on each release (the rows end in time order), and makes every batch
-- read just the entries it removes.
--
-- Built before the BRIN index is dropped, so the purge always has one; both without blocking
-- releases, and re-runnable (a failed concurrent build leaves an invalid index, dropped first).
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_ended_at;
CREATE INDEX CONCURRENTLY allocation_history_ended_at ON {schema}.allocation_history (ended_at);
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_ended;
