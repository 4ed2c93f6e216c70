-- Removes defunct silo rows: every row that is not Active (3) and whose last sign of life is
-- older than the cutoff (IAmAliveTime parameter). Active rows are never removed here: only the
-- liveness protocol may declare a silo dead.
-- "Last sign of life" is the latest of the start time, the IAmAlive time and every suspicion vote
-- time, as Orleans' cleanup agent computes it when it picks the cutoff: a silo declared dead
-- recently (the declaration records a vote) stays visible even if its own last heartbeat is old,
-- so it can still learn that it was declared dead. Votes are Orleans' 'silo,time|silo,time'
-- string with time as 'yyyy-MM-dd HH:mm:ss.fff GMT'; a malformed vote fails this statement
-- (which Orleans logs and retries later) rather than deleting anything. The version is not moved:
-- removing a dead row changes no live silo's view.
-- Parameters: DeploymentId, IAmAliveTime.
DELETE FROM membership AS m
 WHERE m.cluster_id = @DeploymentId
   AND m.status <> 3
   AND GREATEST(
         m.start_time,
         m.i_am_alive_time,
         (SELECT max(replace(split_part(vote, ',', 2), ' GMT', '')::timestamp AT TIME ZONE 'UTC')
            FROM unnest(string_to_array(m.suspect_times, '|')) AS vote)
       ) < @IAmAliveTime;
