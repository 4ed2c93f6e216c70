-- One statement, one round trip, autocommit: ends an allocation whose caller gave up, unless a
-- later activation of the pool has claimed it since ({schema}.release_abandoned, issue 47).
-- $1 pool, $2 allocation id, $3 its epoch, $4 NOTIFY channel, $5 the releasing activation's fence.
SELECT * FROM {schema}.release_abandoned($1, $2::uuid, $3::bigint, $4, $5::bigint);
