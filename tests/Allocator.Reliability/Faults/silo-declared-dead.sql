-- Whether the cluster's membership table says the silo on @port is dead: its latest incarnation
-- (highest generation) has status 6 (Dead), as voted by the survivors' failure detection.
SELECT coalesce((SELECT m.status = 6
                   FROM allocator_cluster.membership m
                  WHERE m.cluster_id = @cluster AND m.port = @port
                  ORDER BY m.generation DESC
                  LIMIT 1), false);
