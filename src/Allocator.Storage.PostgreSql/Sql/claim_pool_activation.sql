-- One statement, autocommit (issue 47): a new activation of the pool's grain takes the pool over
-- from every earlier one. The UPDATE's row lock waits for a release_abandoned of an earlier
-- activation in flight (it holds the row FOR SHARE), so that release either committed before
-- the claim or finds the fence moved. $1 pool. No row (no such pool): the caller reads 0.
UPDATE {schema}.pools p SET activation = p.activation + 1 WHERE p.pool_id = $1 RETURNING p.activation;
