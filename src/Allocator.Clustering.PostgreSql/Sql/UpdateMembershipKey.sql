-- Changes a silo's status, suspicion votes and IAmAlive time and moves the cluster's version on
-- by one, atomically, or does nothing. As for inserts, the version is the only concurrency check
-- (the provider does not pass a row etag): the UPDATE of the version row serializes writers and
-- the loser of a race re-checks the version, finds it moved, and changes nothing.
-- The EXISTS keeps the version still when the silo has no row. A row deleted by a concurrent
-- cleanup after this statement's snapshot can still move the version with nothing updated (and
-- false returned): other writers then re-read, which is harmless; no write is ever lost.
-- Parameters: DeploymentId, Address, Port, Generation, Status, SuspectTimes, IAmAliveTime, Version.
WITH bumped AS (
    UPDATE membership_version
       SET version = version + 1, changed_at = now()
     WHERE cluster_id = @DeploymentId
       AND version = @Version
       AND EXISTS (
           SELECT 1 FROM membership
            WHERE cluster_id = @DeploymentId
              AND address = @Address AND port = @Port AND generation = @Generation)
    RETURNING cluster_id
), updated AS (
    UPDATE membership AS m
       SET status = @Status,
           suspect_times = @SuspectTimes,
           i_am_alive_time = @IAmAliveTime
      FROM bumped
     WHERE m.cluster_id = bumped.cluster_id
       AND m.address = @Address AND m.port = @Port AND m.generation = @Generation
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM updated);
