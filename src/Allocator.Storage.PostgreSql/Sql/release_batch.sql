-- One statement, one round trip, autocommit: ends a batch of allocations inside
-- {schema}.release_batch (see Functions/release_batch.sql for the lock order and why).
-- $1 pool, $2 allocation ids, $3 their epochs (same length, request order), $4 NOTIFY channel,
-- $5 the owner releasing each (NULL: anyone; issue 22).
SELECT * FROM {schema}.release_batch($1, $2::uuid[], $3::bigint[], $4, $5::text[]);
