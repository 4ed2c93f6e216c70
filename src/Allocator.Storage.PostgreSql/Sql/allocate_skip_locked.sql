-- One statement, one round trip, autocommit: allocates the batch with FOR NO KEY UPDATE SKIP
-- LOCKED inside {schema}.allocate_batch (Functions/allocate_batch.sql). Rows locked by other
-- transactions are passed over; requests that found only locked rows come back 'locked' and are
-- retried by the caller in a fresh statement, never inside this transaction.
-- $6: how long an ended key's outcome is answered (HistoryRetention), in ms. $7: each request's
-- lease when neither it ($5) nor the pool names one.
SELECT * FROM {schema}.allocate_batch($1, $2::text[], $3::integer[], $4::jsonb, $5::bigint[], true, NULL, $6, $7::bigint[]);
