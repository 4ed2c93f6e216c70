-- Every successful reply the load generator received must have its committed row: an answer
-- for an allocation that was rolled back (or never written) would hand out a slot twice.
-- @allocation_ids is the uuid[] of replies; rows come back for the missing ones only.
SELECT r.allocation_id
FROM unnest(@allocation_ids::uuid[]) AS r(allocation_id)
LEFT JOIN {schema}.allocations AS a ON a.allocation_id = r.allocation_id
WHERE a.allocation_id IS NULL
LIMIT 1000;
