namespace Allocator.Host.Storage;

/// <summary>Where pools live, for the endpoints and telemetry (issue 23): one database, or several through the directory.</summary>
internal interface IPoolPlacement
{
    /// <summary>The pool's database as far as this instance knows without a read (telemetry); null when it does not know.</summary>
    string? KnownDatabaseOf(string poolId);

    /// <summary>The pool's database (a directory read when not known).</summary>
    Task<string> DatabaseOfAsync(string poolId, CancellationToken cancellationToken);

    /// <summary>
    /// Creates or updates a pool. A new pool goes to <paramref name="database"/>, or, when none is
    /// named, to the started database with the fewest pools (the default first among equals); an
    /// existing pool stays where it is.
    /// </summary>
    /// <exception cref="AllocatorException">Conflict: the pool exists on another database than the one named. Unavailable: a database needed cannot be reached, or the pool is being moved.</exception>
    Task<(PoolUpsertResult Result, string Database)> UpsertPoolAsync(string poolId, PoolSettings settings, string? database, CancellationToken cancellationToken);

    /// <summary>Moves a drained, empty pool to <paramref name="database"/> (ADR 0023, docs/postgresql.md "Moving a pool").</summary>
    /// <exception cref="AllocatorException">NotFound: no such pool. Conflict: the pool is not empty, or another move of it is under way. Unavailable: a database cannot be reached.</exception>
    Task<PoolMove> MoveAsync(string poolId, string database, CancellationToken cancellationToken);
}

/// <summary>The outcome of a move: where the pool was and is; <paramref name="Moved"/> false when it was there already.</summary>
internal sealed record PoolMove(string PoolId, string From, string To, bool Moved);

/// <summary>One database: every pool is in it, and nothing is read to say so.</summary>
internal sealed class SingleDatabasePlacement(Databases databases) : IPoolPlacement
{
    private string Name => databases.Default.Name;

    public string? KnownDatabaseOf(string poolId) => Name;

    public Task<string> DatabaseOfAsync(string poolId, CancellationToken cancellationToken) => Task.FromResult(Name);

    public async Task<(PoolUpsertResult Result, string Database)> UpsertPoolAsync(string poolId, PoolSettings settings, string? database, CancellationToken cancellationToken) =>
        (await databases.Default.Store.UpsertPoolAsync(poolId, settings, cancellationToken), Name);

    public async Task<PoolMove> MoveAsync(string poolId, string database, CancellationToken cancellationToken) =>
        await databases.Default.Store.GetPoolAsync(poolId, cancellationToken) is null
            ? throw AllocatorException.PoolNotFound(poolId)
            : new PoolMove(poolId, Name, Name, Moved: false);
}
