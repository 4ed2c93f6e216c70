-- Pools with serialize_registrations: one registration batch at a time per pool (all instances).
-- Transaction-scoped, so it is released when the batch's implicit transaction ends. Sent in the
-- same round trip as register_workers. Keys: the schema's channel name and the pool id.
SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2));
