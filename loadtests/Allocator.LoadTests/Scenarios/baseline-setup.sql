-- BASELINE ONLY. Fencing epochs for the baseline's allocations, far above the store's own, so
-- the baseline's rows never collide with epochs the store hands out.
CREATE SEQUENCE IF NOT EXISTS {schema}.lt_baseline_epoch START WITH 1000000000000;
