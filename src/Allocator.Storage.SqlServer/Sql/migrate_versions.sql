-- Migration step 2 of 3: the table of applied migration versions, then the versions applied.
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
IF OBJECT_ID(N'{schema}.schema_migrations', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.schema_migrations
    (
        version    int           NOT NULL,
        name       nvarchar(200) NOT NULL,
        applied_at datetime2(7)  NOT NULL CONSTRAINT df_schema_migrations_applied_at DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT pk_schema_migrations PRIMARY KEY CLUSTERED (version)
    );
END;

SELECT m.version FROM {schema}.schema_migrations AS m ORDER BY m.version;
