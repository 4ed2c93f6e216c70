-- 0005: session keys compare byte-wise (issue 20, #7). PostgreSQL's session_key took the
-- database's default collation, whose order an OS library upgrade can change under its unique
-- index. Here session_key has been Latin1_General_100_BIN2 (binary: fixed by the engine, never by
-- the operating system) since 0001: nothing to change, only checked, so both stores number their
-- migrations alike.
IF EXISTS (SELECT 1 FROM sys.columns
           WHERE object_id = OBJECT_ID(N'{schema}.allocations') AND name = N'session_key'
             AND collation_name <> N'Latin1_General_100_BIN2')
    THROW 50500, N'allocations.session_key is expected to be Latin1_General_100_BIN2.', 1;
