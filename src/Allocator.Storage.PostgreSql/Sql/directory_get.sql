-- A pool's directory entry (none: it lives in the default database). By primary key, no lock:
-- callers cache what they read and drop it on the pool's settings notification.
SELECT d.database, d.moving_to FROM {schema}.pool_directory d WHERE d.pool_id = $1;
