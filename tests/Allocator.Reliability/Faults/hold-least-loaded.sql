-- A competing session: locks the pool's n least-loaded available workers (what every allocation
-- wants first) FOR UPDATE, which conflicts with the allocation's FOR NO KEY UPDATE, so skip-locked
-- statements must go around them and the blocking fallback waits. Held until the transaction ends.
-- {schema} is replaced by the quoted schema name.
SELECT worker_id
  FROM {schema}.workers
 WHERE pool_id = @pool AND state = 'available'
 ORDER BY score, worker_id
 LIMIT @n
   FOR UPDATE;
