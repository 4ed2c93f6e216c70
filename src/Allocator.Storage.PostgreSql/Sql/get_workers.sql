-- worker_id is COLLATE "C": ordinal order, as the in-memory store.
SELECT w.worker_id::text, w.address, w.capacity, w.load, w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
  FROM {schema}.workers w WHERE w.pool_id = $1 ORDER BY w.worker_id;
