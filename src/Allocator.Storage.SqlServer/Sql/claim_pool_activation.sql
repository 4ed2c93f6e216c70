-- A new activation of the pool's grain takes the pool over from every earlier one (issue 47):
-- one UPDATE, autocommit. Its exclusive row lock waits for a release of an earlier activation in
-- flight (release_batch.sql with a @fence holds the row shared to its commit), so that release
-- either committed before the claim or finds the fence moved.
-- @pool_id nvarchar(128). Result: the new fence; no row when the pool does not exist.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
UPDATE {schema}.pools
SET activation = activation + 1
OUTPUT inserted.activation
WHERE pool_id = @pool_id;
