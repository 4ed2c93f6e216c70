-- Registers a batch of workers in one statement. $2.. arrays come sorted by worker id (ordinal).
-- "locked" takes the row locks of existing workers in (pool, worker id) order before anything
-- changes, and new rows are inserted in the same order, so overlapping batches queue behind
-- each other instead of deadlocking. Capacity below the current load: rejected, row unchanged.
-- A worker missing from the result lost an insert race to a batch that made its capacity
-- too small for its load meanwhile: the caller reports it as CapacityBelowLoad.
WITH input AS (
    SELECT u.worker_id COLLATE "C" AS worker_id, u.address, u.capacity,
           ARRAY(SELECT jsonb_array_elements_text($5 -> (u.ord::integer - 1))) AS tags
      FROM unnest($2::text[], $3::text[], $4::integer[]) WITH ORDINALITY AS u(worker_id, address, capacity, ord)
), locked AS (
    SELECT w.* FROM {schema}.workers w
     WHERE w.pool_id = $1 AND w.worker_id = ANY ($2::text[])
     ORDER BY w.worker_id
     FOR NO KEY UPDATE
), upd AS (
    UPDATE {schema}.workers w
       SET address = r.address, capacity = r.capacity, tags = r.tags, epoch = w.epoch + 1,
           last_heartbeat = now(),
           -- A re-registering offline worker is back; a draining one stays draining.
           state = CASE WHEN w.state = 'offline' THEN 'available' ELSE w.state END
      FROM input r JOIN locked l ON l.worker_id = r.worker_id
     WHERE w.pool_id = $1 AND w.worker_id = r.worker_id AND r.capacity >= l.load
    RETURNING w.*
), numbered AS (
    -- A new row continues the epochs of the id's earlier, deregistered registrations: epochs
    -- never repeat for a worker id (worker_epochs, which deregister_worker raises to the last
    -- epoch of the row it deletes). An upsert, not a read: ON CONFLICT DO UPDATE acts on the
    -- latest committed version of the row, waiting for a transaction that holds it, where a read
    -- sees this statement's snapshot. A deregistration that committed after that snapshot had
    -- kept its epoch there unseen, and the read gave that epoch again (issue 20, #3: 1,413 of
    -- 7,447 registrations racing deregistrations). In worker id order, as every lock here.
    INSERT INTO {schema}.worker_epochs AS e (pool_id, worker_id, epoch)
    SELECT $1, r.worker_id, 1
      FROM input r
     WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.worker_id = r.worker_id)
     ORDER BY r.worker_id
    ON CONFLICT (pool_id, worker_id) DO UPDATE SET epoch = e.epoch + 1
    RETURNING e.worker_id, e.epoch
), ins AS (
    INSERT INTO {schema}.workers AS w (pool_id, worker_id, address, capacity, tags, epoch)
    SELECT $1, r.worker_id, r.address, r.capacity, r.tags, n.epoch
      FROM input r JOIN numbered n ON n.worker_id = r.worker_id
     ORDER BY r.worker_id
    -- Another batch may insert the same new id first: wait for it (index order is the sort
    -- order, so no cycle) and update its row instead of failing the whole statement.
    ON CONFLICT (pool_id, worker_id) DO UPDATE
       SET address = excluded.address, capacity = excluded.capacity, tags = excluded.tags,
           epoch = w.epoch + 1, last_heartbeat = now(),
           state = CASE WHEN w.state = 'offline' THEN 'available' ELSE w.state END
     WHERE excluded.capacity >= w.load
    RETURNING w.*, (w.xmax = 0) AS inserted
)
SELECT 'updated' AS status, u.worker_id::text, u.address, u.capacity, u.load, u.reported_load_index, u.state, u.tags, u.epoch, u.last_heartbeat FROM upd u
UNION ALL
SELECT CASE WHEN n.inserted THEN 'created' ELSE 'updated' END, n.worker_id::text, n.address, n.capacity, n.load, n.reported_load_index, n.state, n.tags, n.epoch, n.last_heartbeat FROM ins n
UNION ALL
SELECT 'capacity_below_load', l.worker_id::text, l.address, l.capacity, l.load, l.reported_load_index, l.state, l.tags, l.epoch, l.last_heartbeat
  FROM locked l JOIN input r ON r.worker_id = l.worker_id
 WHERE r.capacity < l.load;
