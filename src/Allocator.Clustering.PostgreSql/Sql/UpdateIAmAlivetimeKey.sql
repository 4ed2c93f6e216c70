-- A silo's periodic heartbeat. By contract a "dirty write": no version check and no version
-- change, so heartbeats never conflict with membership changes and never make them retry.
-- Parameters: DeploymentId, Address, Port, Generation, IAmAliveTime.
UPDATE membership
   SET i_am_alive_time = @IAmAliveTime
 WHERE cluster_id = @DeploymentId
   AND address = @Address AND port = @Port AND generation = @Generation;
