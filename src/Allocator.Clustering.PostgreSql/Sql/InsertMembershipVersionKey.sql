-- Creates the cluster's version row at version 0, once. Every silo calls this when it starts;
-- ON CONFLICT makes concurrent starts safe, and the boolean tells the provider whether this call
-- created the row. Parameter: DeploymentId.
WITH created AS (
    INSERT INTO membership_version (cluster_id, version)
    VALUES (@DeploymentId, 0)
    ON CONFLICT (cluster_id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM created);
