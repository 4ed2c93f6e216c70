-- Tells every instance listening on the channel ($1) that a pool's capacity changed ($2 is
-- '<pool>:c'). Sent in the same batch as the statement that changed it: NOTIFY is delivered only
-- if that transaction commits.
SELECT pg_notify($1, $2)
