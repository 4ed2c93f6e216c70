-- Forgets a whole cluster: its version row, and through ON DELETE CASCADE every silo row.
-- A silo starting afterwards creates the version row again at 0. Parameter: DeploymentId.
DELETE FROM membership_version
 WHERE cluster_id = @DeploymentId;
