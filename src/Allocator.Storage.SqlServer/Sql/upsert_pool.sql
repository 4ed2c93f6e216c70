-- Creates or updates a pool. A concurrent create of the same pool fails one side with 2627;
-- the store retries it, and the retry updates.
-- Result: created (bit).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @created bit = 0;

BEGIN TRANSACTION;

UPDATE {schema}.pools
SET strategy = @strategy,
    default_lease_ms = @default_lease_ms,
    max_wait_ms = @max_wait_ms,
    heartbeat_timeout_ms = @heartbeat_timeout_ms,
    serialize_registrations = @serialize_registrations,
    placement = @placement
WHERE pool_id = @pool_id;

IF @@ROWCOUNT = 0
BEGIN
    INSERT INTO {schema}.pools (pool_id, strategy, default_lease_ms, max_wait_ms, heartbeat_timeout_ms, serialize_registrations, placement)
    VALUES (@pool_id, @strategy, @default_lease_ms, @max_wait_ms, @heartbeat_timeout_ms, @serialize_registrations, @placement);
    INSERT INTO {schema}.pool_changes (pool_id) VALUES (@pool_id);
    SET @created = 1;
END
ELSE
BEGIN
    UPDATE {schema}.pool_changes SET settings_version = settings_version + 1 WHERE pool_id = @pool_id;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @created AS created;
