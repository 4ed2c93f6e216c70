-- 0008: the pool directory (issue 23, ADR 0023), as PostgreSQL's 0008. Pools can be placed on
-- several databases; the default database's directory says which database holds each pool. A
-- pool without an entry lives in the default database. Created in every database: only the
-- default database's is read. version: bumped by every replacement and read by the change poll
-- (get_pool_changes.sql) as a settings change of the pool, so that instances drop cached routes.
IF OBJECT_ID(N'{schema}.pool_directory', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.pool_directory
    (
        pool_id    nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        [database] nvarchar(63)  COLLATE Latin1_General_100_BIN2 NOT NULL,
        moving_to  nvarchar(63)  COLLATE Latin1_General_100_BIN2 NULL,
        version    bigint        NOT NULL CONSTRAINT df_pool_directory_version DEFAULT (1),
        placed_at  datetime2(7)  NOT NULL CONSTRAINT df_pool_directory_placed_at DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT pk_pool_directory PRIMARY KEY CLUSTERED (pool_id),
        CONSTRAINT ck_pool_directory_database CHECK ([database] <> N'' AND (moving_to IS NULL OR moving_to <> N''))
    );
END;
