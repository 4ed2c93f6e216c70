-- Migration step 1 of 3, inside the migration transaction: serialize migrators of one schema
-- across instances. The lock is owned by the transaction, so commit or rollback releases it.
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @result int;
DECLARE @create_schema nvarchar(300) = N'CREATE SCHEMA ' + QUOTENAME(@schema_name);
EXEC @result = sys.sp_getapplock @resource, N'Exclusive', N'Transaction', @lock_timeout_ms;
IF @result < 0
    THROW 50409, N'Could not take the migration lock (sp_getapplock).', 1;
IF SCHEMA_ID(@schema_name) IS NULL
    -- CREATE SCHEMA must be alone in its batch; EXEC takes a variable, not an expression.
    EXEC (@create_schema);
