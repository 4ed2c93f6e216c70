-- One worker by primary key (pool_id, worker_id); no lock, a committed snapshot.
SELECT w.worker_id::text, w.address, w.capacity, w.load, w.reported_load_index, w.state, w.tags, w.epoch, w.last_heartbeat
  FROM {schema}.workers w WHERE w.pool_id = $1 AND w.worker_id = $2;
