-- Deletes a worker and ends its active allocations ('worker-deregistered'); the allocation rows
-- stay as history (no FK to workers). See Functions/deregister_worker.sql for why
-- it is two statements inside one function call (still one round trip, one transaction).
SELECT removed, ended FROM {schema}.deregister_worker($1, $2);
