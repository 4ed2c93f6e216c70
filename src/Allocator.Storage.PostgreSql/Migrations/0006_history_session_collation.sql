-- allocator:no-transaction
-- 0006: the history's session index compares byte-wise (COLLATE "C", issue 20 #7; see 0005), built
-- without blocking releases. allocate_batch looks keys up with COLLATE "C", which only this index
-- serves. allocation_history_session (default collation) stays for now: during a rolling upgrade
-- the previous build's allocate_batch still looks keys up through it; a later release drops it.
DROP INDEX CONCURRENTLY IF EXISTS {schema}.allocation_history_session_c;
CREATE INDEX CONCURRENTLY allocation_history_session_c ON {schema}.allocation_history (pool_id, session_key COLLATE "C", ended_at);
