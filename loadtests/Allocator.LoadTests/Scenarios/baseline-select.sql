-- BASELINE ONLY: the interactive-transaction allocation the published "old" broker used, kept
-- as the yardstick. Round trip 1 (after BEGIN): lock the true least-loaded row. FOR UPDATE
-- without SKIP LOCKED, so every caller queues on the same hottest row, and the lock is held
-- across the round trips that follow (UPDATE, INSERT, COMMIT).
SELECT worker_id
FROM {schema}.workers
WHERE pool_id = @pool_id
  AND state = 'available'
  AND load + @units <= capacity
ORDER BY score, worker_id
LIMIT 1
FOR UPDATE;
