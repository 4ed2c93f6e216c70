-- 0004: registration epochs survive deregistration (issue 12, #4): deregister_worker keeps the
-- worker's last epoch here and a new registration of the id continues from it, so an epoch never
-- repeats for a (pool, worker id).
IF OBJECT_ID(N'{schema}.worker_epochs', N'U') IS NULL
BEGIN
    CREATE TABLE {schema}.worker_epochs
    (
        pool_id   nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        worker_id nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
        epoch     bigint NOT NULL,
        CONSTRAINT pk_worker_epochs PRIMARY KEY CLUSTERED (pool_id, worker_id),
        CONSTRAINT fk_worker_epochs_pool FOREIGN KEY (pool_id) REFERENCES {schema}.pools (pool_id)
    );
END;
