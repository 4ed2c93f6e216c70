-- worker-churn sends stale load reports with load index 10000 and current ones below 5000: a
-- worker that holds 10000 took a stale report. {schema} is replaced by the quoted schema name.
SELECT worker_id, epoch
  FROM {schema}.workers
 WHERE pool_id = @pool AND reported_load_index = 10000;
