-- Every successful reply the load generator received must have its committed row: an answer
-- for an allocation that was rolled back (or never written) would hand out a slot twice.
-- @allocation_ids is the uuid[] of replies; rows come back for the missing ones only (active in
-- allocations or ended in allocation_history; the history keeps them for HistoryRetention).
SELECT r.allocation_id
FROM unnest(@allocation_ids::uuid[]) AS r(allocation_id)
WHERE NOT EXISTS (SELECT 1 FROM {schema}.allocations AS a WHERE a.allocation_id = r.allocation_id)
  AND NOT EXISTS (SELECT 1 FROM {schema}.allocation_history AS h WHERE h.allocation_id = r.allocation_id)
LIMIT 1000;
