-- Adds a silo's row and moves the cluster's version on by one, atomically, or does nothing.
-- Version is the version the caller read (its etag). The UPDATE locks the version row: a
-- concurrent writer holding the same version waits, then re-checks `version = expected` against
-- the committed row, finds it moved and updates nothing, so exactly one of them wins.
-- The NOT EXISTS refuses a silo that already has a row without moving the version (the contract
-- wants a failed insert to leave no trace). Should a duplicate still slip through, the primary
-- key fails the whole statement, version bump included.
-- Parameters: DeploymentId, Address, Port, Generation, SiloName, HostName, Status, ProxyPort,
-- StartTime, IAmAliveTime, Version.
WITH bumped AS (
    UPDATE membership_version
       SET version = version + 1, changed_at = now()
     WHERE cluster_id = @DeploymentId
       AND version = @Version
       AND NOT EXISTS (
           SELECT 1 FROM membership
            WHERE cluster_id = @DeploymentId
              AND address = @Address AND port = @Port AND generation = @Generation)
    RETURNING cluster_id
), inserted AS (
    INSERT INTO membership (cluster_id, address, port, generation, silo_name, host_name,
                            status, proxy_port, suspect_times, start_time, i_am_alive_time)
    SELECT cluster_id, @Address, @Port, @Generation, @SiloName, @HostName,
           @Status, @ProxyPort, NULL, @StartTime, @IAmAliveTime
      FROM bumped
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM inserted);
