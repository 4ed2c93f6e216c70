-- 0004: registration epochs survive deregistration.
--
-- A worker registered again after deregistration started over at epoch 1, so a late report
-- carrying an epoch of its earlier registration was accepted (issue 12, #4). Deregistration now
-- keeps the worker's last epoch here, and a new registration of that id continues from it: an
-- epoch never repeats for a (pool, worker id).
CREATE TABLE {schema}.worker_epochs (
    pool_id   text COLLATE "C" NOT NULL REFERENCES {schema}.pools (pool_id) ON DELETE CASCADE,
    worker_id text COLLATE "C" NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (pool_id, worker_id)
);
