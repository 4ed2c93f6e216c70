-- Gateways for clients: silos in the given status (the provider passes Active) that accept
-- clients (a proxy port). Parameters: DeploymentId, Status.
SELECT
    address    AS "Address",
    proxy_port AS "ProxyPort",
    generation AS "Generation"
FROM membership
WHERE cluster_id = @DeploymentId
  AND status = @Status
  AND proxy_port > 0;
