-- Failure detection as the membership table records it: for each incarnation of the cluster's
-- silos (port, generation), its status (6 Dead) and the suspicion votes cast against it since
-- @since. Votes are Orleans' 'silo,time|silo,time' string, time as 'yyyy-MM-dd HH:mm:ss.fff GMT'.
SELECT m.port,
       m.generation,
       m.status,
       (SELECT count(*)
          FROM unnest(string_to_array(m.suspect_times, '|')) AS vote
         WHERE replace(split_part(vote, ',', 2), ' GMT', '')::timestamp AT TIME ZONE 'UTC' >= @since)::int AS votes
  FROM allocator_cluster.membership m
 WHERE m.cluster_id = @cluster;
