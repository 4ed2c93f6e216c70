-- 0008: the pool directory (issue 23, ADR 0023). Pools can be placed on several databases; the
-- default database's directory says which database holds each pool. A pool without an entry
-- lives in the default database, so pools made before this (and every single-database
-- deployment) need no entry. Created in every database: only the default database's is read.
CREATE TABLE {schema}.pool_directory (
    pool_id   text COLLATE "C" PRIMARY KEY,
    -- A database name of Allocator:Databases (lower case), never a connection string.
    database  text NOT NULL CHECK (database <> ''),
    -- Set while a move takes the pool to that database: every instance answers the pool 503
    -- (retry) until the move ends (docs/postgresql.md, "Moving a pool").
    moving_to text NULL CHECK (moving_to <> ''),
    placed_at timestamptz NOT NULL DEFAULT now()
);
