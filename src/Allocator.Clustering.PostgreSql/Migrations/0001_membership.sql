-- Orleans cluster membership, written to the contract of Microsoft.Orleans.Clustering.AdoNet
-- (docs/clustering.md explains how the contract was derived). Schema only: the queries the
-- provider runs live in Sql/*.sql and are upserted into orleansquery on every start.
--
-- {schema} is replaced by the quoted schema name. Orleans itself never names the schema: its
-- connection string sets search_path to it, so one database can hold several clusters' schemas.

-- One row per cluster (Orleans' ClusterId, passed as DeploymentId). Its version is the optimistic
-- concurrency token of the whole membership protocol: every insert or update of a silo's row must
-- present the version it read and moves it on by one in the same statement. The row lock taken by
-- that UPDATE serializes writers, and a writer that waited re-checks the version after the winner
-- commits, finds it moved, and changes nothing: of two writers holding the same version, exactly
-- one wins.
CREATE TABLE {schema}.membership_version (
    cluster_id  text        NOT NULL PRIMARY KEY,
    version     integer     NOT NULL DEFAULT 0 CHECK (version >= 0),
    -- When the version last moved: for operators, never read by Orleans.
    changed_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per silo incarnation. A silo is identified by its endpoint and generation (a restarted
-- silo on the same endpoint has a new generation, so a new row), hence the primary key.
CREATE TABLE {schema}.membership (
    cluster_id      text        NOT NULL
        -- A silo row cannot outlive its cluster's version row; deleting the cluster's version row
        -- (DeleteMembershipTableEntriesKey) removes its silos with it.
        REFERENCES {schema}.membership_version (cluster_id) ON DELETE CASCADE,
    address         text        NOT NULL,
    port            integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    generation      integer     NOT NULL,
    -- The provider casts these two to string when reading; NULL would fail every read of the
    -- table, so they are refused at write time instead.
    silo_name       text        NOT NULL,
    host_name       text        NOT NULL,
    -- Orleans' SiloStatus as its integer value (3 = Active, 6 = Dead).
    status          integer     NOT NULL,
    -- Gateway (client) port; 0 when the silo accepts no clients.
    proxy_port      integer     NOT NULL CHECK (proxy_port BETWEEN 0 AND 65535),
    -- Suspicion votes, Orleans' own encoding: 'silo,time|silo,time', time as 'yyyy-MM-dd HH:mm:ss.fff GMT'.
    suspect_times   text,
    start_time      timestamptz NOT NULL,
    i_am_alive_time timestamptz NOT NULL,
    PRIMARY KEY (cluster_id, address, port, generation)
);
-- No further index: a cluster holds a handful of rows, and every query filters on cluster_id,
-- the leading column of the primary key.

-- The provider's fixed bootstrap query is `SELECT QueryKey, QueryText FROM OrleansQuery`, unquoted,
-- which PostgreSQL folds to orleansquery(querykey, querytext): so these names are lower case, and
-- the provider finds the columns through Npgsql's case-insensitive name lookup.
CREATE TABLE {schema}.orleansquery (
    querykey  text NOT NULL PRIMARY KEY,
    querytext text NOT NULL
);
