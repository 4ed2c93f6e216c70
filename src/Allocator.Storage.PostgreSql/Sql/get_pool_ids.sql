-- Every pool id: after the LISTEN connection was reopened, notifications sent while it was down
-- are lost, so the change feed raises a catch-up (capacity and settings) for each pool.
SELECT p.pool_id::text FROM {schema}.pools p;
