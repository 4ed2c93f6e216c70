-- Every pool id: after the LISTEN connection was reopened, notifications sent while it was down
-- are lost, so the change feed raises a catch-up (capacity and settings) for each pool. The
-- directory's pools too (issue 23): a settings notification is also how a changed placement
-- reaches the instances that cache routes, and those may have been lost as well.
SELECT p.pool_id::text FROM {schema}.pools p
UNION
SELECT d.pool_id::text FROM {schema}.pool_directory d;
