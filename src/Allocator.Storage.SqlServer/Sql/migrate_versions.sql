-- Migration step 2 of 3: the table of applied migrations, then what is applied. checksum:
-- SHA-256 of the file as embedded, so an applied migration edited afterwards is refused loudly.
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
IF OBJECT_ID(N'{schema}.schema_migrations', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.schema_migrations
    (
        version    int           NOT NULL,
        name       nvarchar(200) NOT NULL,
        checksum   char(64)      NULL,
        applied_at datetime2(7)  NOT NULL CONSTRAINT df_schema_migrations_applied_at DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT pk_schema_migrations PRIMARY KEY CLUSTERED (version)
    );
END;

SELECT m.version, m.name, m.checksum FROM {schema}.schema_migrations AS m ORDER BY m.version;
