-- The cluster's version and every silo row, read in one statement, so in one snapshot: the
-- protocol requires the version and the rows to be read atomically. The LEFT JOIN returns the
-- version even when the cluster has no silo yet (one row with NULL silo columns, which the
-- provider reads as "no entry"). Columns are aliased to the provider's exact names.
-- Parameter: DeploymentId.
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
LEFT JOIN membership AS m ON m.cluster_id = v.cluster_id
WHERE v.cluster_id = @DeploymentId
ORDER BY m.address, m.port, m.generation;
