-- The cluster's version and one silo's row, in one statement (one snapshot), as ReadAll does for
-- all rows. The version row is returned even when the silo has no row.
-- Parameters: DeploymentId, Address, Port, Generation.
SELECT
    v.version         AS "Version",
    m.address         AS "Address",
    m.port            AS "Port",
    m.generation      AS "Generation",
    m.silo_name       AS "SiloName",
    m.host_name       AS "HostName",
    m.status          AS "Status",
    m.proxy_port      AS "ProxyPort",
    m.suspect_times   AS "SuspectTimes",
    m.start_time      AS "StartTime",
    m.i_am_alive_time AS "IAmAliveTime"
FROM membership_version AS v
LEFT JOIN membership AS m
       ON m.cluster_id = v.cluster_id
      AND m.address = @Address
      AND m.port = @Port
      AND m.generation = @Generation
WHERE v.cluster_id = @DeploymentId;
