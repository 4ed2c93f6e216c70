-- Compare and set of a pool's directory entry: @expected_database/@expected_moving_to the entry
-- expected (@expected_database NULL: no entry yet), @database/@moving_to the new one. The
-- UPDATE's row lock (or the primary key, for a first entry) orders two instances racing for one
-- pool: exactly one sees its expected entry. version is bumped, which the change poll reports as
-- a settings change of the pool (cached routes are dropped). Result: replaced (bit).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- Pooled connections can carry an isolation level leaked by an earlier user: never inherit it.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT {lock_timeout_ms};
-- This statement's own time budget, inside the client's command timeout (SQL Server has no
-- statement_timeout; see docs/sqlserver.md): past it, roll back rather than commit.
DECLARE @deadline datetime2(7) = DATEADD(millisecond, {statement_timeout_ms}, SYSUTCDATETIME());

DECLARE @replaced bit = 0;

BEGIN TRANSACTION;

IF @expected_database IS NULL
BEGIN
    -- UPDLOCK, HOLDLOCK: a range lock on the missing key, so two first entries cannot both pass.
    IF NOT EXISTS (SELECT 1 FROM {schema}.pool_directory AS d WITH (UPDLOCK, HOLDLOCK, ROWLOCK) WHERE d.pool_id = @pool_id)
    BEGIN
        INSERT INTO {schema}.pool_directory (pool_id, [database], moving_to) VALUES (@pool_id, @database, @moving_to);
        SET @replaced = 1;
    END;
END
ELSE
BEGIN
    UPDATE {schema}.pool_directory
    SET [database] = @database, moving_to = @moving_to, version = version + 1, placed_at = SYSUTCDATETIME()
    WHERE pool_id = @pool_id
      AND [database] = @expected_database
      AND (moving_to = @expected_moving_to OR (moving_to IS NULL AND @expected_moving_to IS NULL));
    IF @@ROWCOUNT = 1
        SET @replaced = 1;
END;

-- A commit after the budget could land after the client gave up: THROW rolls back (XACT_ABORT).
IF SYSUTCDATETIME() > @deadline
    THROW 50408, N'Statement time budget exceeded; rolled back.', 1;
COMMIT TRANSACTION;

SELECT @replaced AS replaced;
