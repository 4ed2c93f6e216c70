-- Time-ordered allocation ids (UUID version 7, RFC 9562) instead of random ones (v4).
-- Every allocation inserts an entry into the allocation primary key and every release another;
-- with random ids each lands on a random leaf of an index that only grows (101 MB after a
-- 10-minute sustained run): after every checkpoint each touched leaf costs a full-page image in
-- the WAL, and the leaves compete for cache. Time-ordered ids land near the right edge. The
-- in-memory and SQL Server stores hand out v7 ids too (Guid.CreateVersion7).
-- 48 bits of Unix time in milliseconds (the database clock), then 74 random bits; within one
-- millisecond the order is random, which keeps the ids unguessable. Built from a v4 id: its
-- first six bytes are overwritten with the time, and the version nibble (the high half of byte
-- 6; set_bit numbers bits from the least significant bit of each byte) turned from 0100 to
-- 0111. The variant bits of the v4 id are already those of v7.
CREATE OR REPLACE FUNCTION {schema}.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
               set_bit(set_bit(
                   overlay(uuid_send(gen_random_uuid())
                           PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                           FROM 1 FOR 6),
                   52, 1), 53, 1),
               'hex')::uuid
$$;
