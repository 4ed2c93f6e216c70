namespace Allocator;

/// <summary>
/// What placing pools over several databases (issue 23, ADR 0023) asks of each database's store
/// beyond <see cref="IWorkerStore"/>: its start-up, the pool directory (kept in the default
/// database: the host calls the directory members on that database's store only) and the removal
/// of an empty pool that moved away. Every database store implements it on the store class.
/// </summary>
public interface IPoolPlacementStore
{
    /// <summary>
    /// Migrates the schema and opens what the store keeps open (PostgreSQL's LISTEN connection).
    /// The single-store registrations do this in the host's starting step; a store registered
    /// under a database name (keyed) is started by its owner, which decides what a database that
    /// cannot be reached at start means.
    /// </summary>
    Task InitializeAsync(CancellationToken cancellationToken = default);

    /// <summary>The pool's directory entry, or <see langword="null"/> when it has none (it lives in the default database).</summary>
    Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default);

    /// <summary>
    /// Replaces the pool's directory entry with <paramref name="replacement"/> if the entry is
    /// still <paramref name="expected"/> (compare and set; <see langword="null"/>: the pool has no
    /// entry yet), and tells every instance through this store's change feed (a
    /// <see cref="PoolChangeKind.SettingsChanged"/> of the pool), so that routes cached elsewhere
    /// are dropped.
    /// </summary>
    /// <returns>Whether the entry was replaced; <see langword="false"/>: it was not <paramref name="expected"/> (read it again).</returns>
    Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default);

    /// <summary>
    /// How many pools each database holds: the directory's entries by database, with this
    /// database's own pools that have no entry counted under <paramref name="defaultDatabase"/>.
    /// </summary>
    Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default);

    /// <summary>
    /// Deletes the pool from this database, in one statement, only if it has no worker and no
    /// active allocation (the last step of a move). Its workers' epoch records go with it; what
    /// becomes of its ended allocations is the store's to say (docs/postgresql.md, docs/sqlserver.md).
    /// Notifies a settings change of the pool, so that cached settings are dropped.
    /// </summary>
    Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default);
}
