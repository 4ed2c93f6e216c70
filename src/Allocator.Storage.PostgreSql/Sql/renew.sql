-- Extends a lease from database now() and advances the fencing epoch, if $3 is current.
-- $4: lease in ms or NULL for the pool's default (NULL default: no expiry).
-- FOR UPDATE on the allocation row: renew, release and reap of one allocation serialize.
-- No row: not active (the caller then reads the history) or not found. An expired lease is
-- not renewed ('expired' true: the caller answers not active). $5: the owner renewing (issue 22;
-- NULL: anyone): another owner's allocation is no row, as a missing one (an owner is the part of
-- session_key before the first U+001F; a key without one has no owner).
-- Every read of `allocations` names the id ($2), and the pool test is written "(pool_id = $1) IS
-- TRUE", which no index serves: planned by statistics that counted the table empty (taken when
-- every allocation had ended, its pages still there), `allocations` is estimated at one row, and
-- the pool's prefix of allocations_session, or a whole read of the primary key joined to the
-- locked row, looked as cheap as the id's entry: each call read every active allocation
-- (issue 24, ExplainTests).
WITH target AS (
    SELECT a.* FROM {schema}.allocations a
     WHERE a.allocation_id = $2 AND (a.pool_id = $1) IS TRUE
       AND ($5::text IS NULL OR strpos(a.session_key, chr(31)) = 0 OR split_part(a.session_key, chr(31), 1) = $5::text)
       FOR UPDATE
), renewed AS (
    UPDATE {schema}.allocations a
       SET epoch = nextval('{schema}.allocation_epoch'),
           expires_at = CASE WHEN coalesce($4::bigint, p.default_lease_ms) IS NULL THEN NULL
                             ELSE now() + coalesce($4::bigint, p.default_lease_ms) * interval '1 millisecond' END
      FROM target t JOIN {schema}.pools p ON p.pool_id = t.pool_id
     WHERE a.allocation_id = $2 AND a.allocation_id = t.allocation_id AND t.epoch = $3
       -- Expired is expired at this statement, whether or not the reaper has run (#5).
       AND (t.expires_at IS NULL OR t.expires_at > now())
    RETURNING a.*
)
SELECT t.allocation_id, t.worker_id::text, t.address, t.session_key, t.units,
       coalesce(r.epoch, t.epoch) AS epoch, t.created_at,
       CASE WHEN r.allocation_id IS NOT NULL THEN r.expires_at ELSE t.expires_at END AS expires_at,
       CASE WHEN r.allocation_id IS NULL AND t.expires_at <= now() THEN t.expires_at END AS ended_at,
       (r.allocation_id IS NOT NULL) AS changed,
       (t.expires_at IS NOT NULL AND t.expires_at <= now()) AS expired
  FROM target t LEFT JOIN renewed r ON r.allocation_id = t.allocation_id;
