-- 0007: a session key belongs to its owner (issue 22). The store keeps an owned allocation's key as
-- "owner U+001F key" (src/Shared/StoredSessionKey.cs) in session_key, so the unique index
-- allocations_session enforces one active allocation per (pool, owner, key) with no second column
-- in it, and the previous build (which sends keys without an owner) keeps working during a rolling
-- upgrade. session_key is text: nothing to widen. Said where a reader of the schema looks.
COMMENT ON COLUMN {schema}.allocations.session_key IS
    'The caller''s idempotency key; an owned allocation''s as "owner U+001F key" (src/Shared/StoredSessionKey.cs).';
COMMENT ON COLUMN {schema}.allocation_history.session_key IS
    'As allocations.session_key: "owner U+001F key" for an owned allocation.';
