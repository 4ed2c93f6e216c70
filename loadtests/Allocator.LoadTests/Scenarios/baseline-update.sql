-- BASELINE ONLY. Round trip 2, lock still held: take the slots. The score is the store's
-- load * 10^12 / capacity (the benchmark's workers report no load index). If the store makes
-- score a generated column, drop the score assignment here.
UPDATE {schema}.workers
SET load = load + @units
WHERE pool_id = @pool_id AND worker_id = @worker_id;
