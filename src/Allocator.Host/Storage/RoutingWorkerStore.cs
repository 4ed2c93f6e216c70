using System.Collections.Concurrent;

namespace Allocator.Host.Storage;

/// <summary>
/// The store of a host with several databases (issue 23, ADR 0023): every pool-scoped call goes
/// to the store of the pool's database, found in the pool directory (kept in the default
/// database; a pool without an entry lives there). The grains, the endpoints and the settings
/// checks take it as their <see cref="IWorkerStore"/>, <see cref="IPoolChangeFeed"/> and
/// <see cref="IPoolSettingsCache"/>, unchanged.
/// </summary>
/// <remarks>
/// <para>Routes are cached per pool that exists: a pool's first call reads the directory once;
/// a name that names no pool is never cached (issue 22: unknown names cost nothing lasting), so
/// each call for it reads the directory again. A cached route is dropped when the default
/// database's change feed reports a settings change of the pool, which is what a directory change
/// notifies (also after the feed reconnects: its catch-up covers the directory's pools). A call
/// that a stale route sent to a database the pool has left finds no pool there (the move removed
/// it), reads the directory again and goes to the new database.</para>
/// <para>A database that is down or not started answers its own pools' calls 503 (Unavailable);
/// the others are not touched. The default database being down leaves cached routes working; a
/// route not cached then answers 503 too (the directory cannot be read).</para>
/// </remarks>
internal sealed class RoutingWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolSettingsCache, IPoolPlacement, IDisposable
{
    private readonly Databases _databases;
    private readonly ConcurrentDictionary<string, Database> _routes = new(StringComparer.Ordinal);
    private readonly IDisposable _directoryChanges;
    private readonly PoolMoves _moves;
    private long _generation;

    public RoutingWorkerStore(Databases databases)
    {
        if (databases.All.Any(d => d.Placement is null))
        {
            throw new ArgumentException("Every database's store must provide IPoolPlacementStore.", nameof(databases));
        }

        _databases = databases;
        _moves = new PoolMoves(databases, Forget, Resolve);
        _directoryChanges = databases.Default.Changes.Subscribe(change =>
        {
            if (change.Kind == PoolChangeKind.SettingsChanged)
            {
                Forget(change.PoolId);
            }
        });
    }

    public string Name => _databases.Default.Store.Name;

    /// <summary>
    /// The smallest database's connections (none when a database does not say): the grains'
    /// store slots are the silo's, not a database's, and a silo whose load is all on one database
    /// must not send it more batches than its pool holds. With several busy databases the silo
    /// then has fewer batches in flight than all their connections would allow (75 for pools of
    /// 100, each batch of up to 256 requests).
    /// </summary>
    public int? ConnectionLimit
    {
        get
        {
            int? smallest = null;
            foreach (var database in _databases.All)
            {
                if (database.Store.ConnectionLimit is not { } limit)
                {
                    return null;
                }

                smallest = Math.Min(smallest ?? limit, limit);
            }

            return smallest;
        }
    }

    // --- routing ---------------------------------------------------------------------------

    /// <summary>The database of a pool: the cached route, or the directory's entry (then cached if the pool exists there).</summary>
    private ValueTask<(Database Database, bool Cached)> RouteAsync(string poolId, CancellationToken cancellationToken)
    {
        if (_routes.TryGetValue(poolId, out var cached))
        {
            cached.EnsureStarted();
            return ValueTask.FromResult((cached, true));
        }

        return LookUpAsync(poolId, cancellationToken);
    }

    private async ValueTask<(Database Database, bool Cached)> LookUpAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        var generation = Interlocked.Read(ref _generation);
        var database = await ReadDirectoryAsync(poolId, cancellationToken);

        // Cache only a pool that exists (its settings are read anyway, and kept by that database's
        // cache), and only if no route was dropped while this read was in flight.
        if (await database.Settings.GetAsync(poolId, cancellationToken) is not null && Interlocked.Read(ref _generation) == generation)
        {
            _routes[poolId] = database;
        }

        return (database, false);
    }

    /// <summary>The database the directory names for the pool (the default when it has no entry), started.</summary>
    private async Task<Database> ReadDirectoryAsync(string poolId, CancellationToken cancellationToken)
    {
        var entry = await ReadEntryAsync(poolId, cancellationToken);
        if (entry?.MovingTo is { } target)
        {
            throw PoolMoves.BeingMoved(entry.PoolId, entry.Database, target);
        }

        var database = Resolve(entry?.Database ?? _databases.Default.Name, poolId);
        database.EnsureStarted();
        return database;
    }

    internal async Task<PoolPlacement?> ReadEntryAsync(string poolId, CancellationToken cancellationToken)
    {
        var directory = _databases.Default;
        directory.EnsureStarted();
        return await directory.Placement!.GetPlacementAsync(poolId, cancellationToken);
    }

    internal Database Resolve(string name, string poolId) =>
        _databases.Find(name) ?? throw new AllocatorException(AllocatorErrorKind.Unavailable,
            $"Pool '{poolId}' is placed on database '{name}', which this instance does not have (Allocator:Databases:{name}); nothing was written.",
            outcomeUnknown: false, innerException: null);

    /// <summary>Drops a pool's cached route (its placement changed, or it was found missing where the route pointed).</summary>
    private void Forget(string poolId)
    {
        Interlocked.Increment(ref _generation);
        _routes.TryRemove(poolId, out _);
    }

    /// <summary>
    /// Runs a pool-scoped call on the pool's database. A call that a cached route sent to a
    /// database the pool has left (answered "not found") reads the directory again and, if the
    /// pool is now elsewhere, runs there: "not found" is only answered before anything is written.
    /// </summary>
    private async Task<T> OnPoolAsync<T>(string poolId, Func<IWorkerStore, Task<T>> call, CancellationToken cancellationToken)
    {
        var (database, cached) = await RouteAsync(poolId, cancellationToken);
        try
        {
            return await call(database.Store);
        }
        catch (AllocatorException ex) when (ex.Kind == AllocatorErrorKind.NotFound && cached)
        {
            Forget(poolId);
            var (fresh, _) = await LookUpAsync(poolId, cancellationToken);
            if (ReferenceEquals(fresh, database))
            {
                throw;
            }

            return await call(fresh.Store);
        }
    }

    // --- IWorkerStore ------------------------------------------------------------------------

    public async Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) =>
        (await UpsertPoolAsync(poolId, settings, database: null, cancellationToken)).Result;

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        var (database, cached) = await RouteAsync(poolId, cancellationToken);
        var pool = await database.Store.GetPoolAsync(poolId, cancellationToken);
        if (pool is null && cached)
        {
            Forget(poolId);
            var (fresh, _) = await LookUpAsync(poolId, cancellationToken);
            return ReferenceEquals(fresh, database) ? null : await fresh.Store.GetPoolAsync(poolId, cancellationToken);
        }

        return pool;
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.GetPoolStatisticsAsync(poolId, cancellationToken), cancellationToken);

    public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.RegisterWorkersAsync(poolId, workers, cancellationToken), cancellationToken);

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.DeregisterWorkerAsync(poolId, workerId, cancellationToken), cancellationToken);

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.SetWorkerStateAsync(poolId, workerId, state, cancellationToken), cancellationToken);

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken), cancellationToken);

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.GetWorkerAsync(poolId, workerId, cancellationToken), cancellationToken);

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.GetWorkersAsync(poolId, cancellationToken), cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.AllocateAsync(poolId, requests, cancellationToken), cancellationToken);

    /// <summary>The grain's call: the pool's store tells each outcome as its statement commits (the interface's default would only at the end).</summary>
    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        OnPoolAsync(poolId, store => store.AllocateAsync(poolId, requests, onCommitted, cancellationToken), cancellationToken);

    public Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        OnPoolAsync(poolId, store => store.AllocateFencedAsync(poolId, requests, fence, onCommitted, cancellationToken), cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.ReleaseAsync(poolId, allocationId, epoch, cancellationToken), cancellationToken);

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.ReleaseAsync(poolId, releases, cancellationToken), cancellationToken);

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.ClaimPoolActivationAsync(poolId, cancellationToken), cancellationToken);

    public Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.ReleaseAbandonedAsync(poolId, release, fence, cancellationToken), cancellationToken);

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken), cancellationToken);

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.GetAllocationAsync(poolId, allocationId, cancellationToken), cancellationToken);

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) =>
        OnPoolAsync(poolId, store => store.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken), cancellationToken);

    /// <summary>
    /// Reaps every started database. One that fails does not stop the others: what they ended is
    /// returned; only when every database failed is the first failure thrown. (The host's reaper
    /// runs one loop per database instead, <see cref="LeaseReaper"/>.)
    /// </summary>
    public async Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default)
    {
        var started = _databases.All.Where(d => d.NotStarted is null).ToList();
        var calls = started.Select(d => d.Store.ReapExpiredAsync(maxCount, cancellationToken)).ToList();
        try
        {
            await Task.WhenAll(calls);
        }
        catch (Exception) when (calls.Any(c => c.IsCompletedSuccessfully))
        {
            // Reported by that database's own reaper loop; the others' work is returned.
        }

        return [.. calls.Where(c => c.IsCompletedSuccessfully).SelectMany(c => c.Result)];
    }

    // --- IPoolChangeFeed: every database's changes ---------------------------------------------

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        return new Subscriptions([.. _databases.All.Select(d => d.Changes.Subscribe(handler))]);
    }

    // --- IPoolSettingsCache --------------------------------------------------------------------

    public ValueTask<PoolSettings?> GetAsync(string poolId, CancellationToken cancellationToken = default)
    {
        if (_routes.TryGetValue(poolId, out var database) && database.NotStarted is null)
        {
            var read = database.Settings.GetAsync(poolId, cancellationToken);
            if (read.IsCompletedSuccessfully && read.Result is not null)
            {
                return read; // The hot path: a cached route, cached settings.
            }

            return SettingsAfterAsync(poolId, database, read, cancellationToken);
        }

        return SettingsAsync(poolId, cancellationToken);
    }

    private async ValueTask<PoolSettings?> SettingsAfterAsync(string poolId, Database database, ValueTask<PoolSettings?> read, CancellationToken cancellationToken)
    {
        if (await read is { } settings)
        {
            return settings;
        }

        // The route pointed at a database without the pool: it may have moved.
        Forget(poolId);
        var (fresh, _) = await LookUpAsync(poolId, cancellationToken);
        return ReferenceEquals(fresh, database) ? null : await fresh.Settings.GetAsync(poolId, cancellationToken);
    }

    private async ValueTask<PoolSettings?> SettingsAsync(string poolId, CancellationToken cancellationToken)
    {
        var (database, _) = await RouteAsync(poolId, cancellationToken);
        return await database.Settings.GetAsync(poolId, cancellationToken);
    }

    public void Invalidate(string poolId)
    {
        if (_routes.TryGetValue(poolId, out var database))
        {
            database.Settings.Invalidate(poolId);
            return;
        }

        foreach (var each in _databases.All)
        {
            each.Settings.Invalidate(poolId);
        }
    }

    // --- IPoolPlacement ------------------------------------------------------------------------

    public string? KnownDatabaseOf(string poolId) => _routes.TryGetValue(poolId, out var database) ? database.Name : null;

    public async Task<string> DatabaseOfAsync(string poolId, CancellationToken cancellationToken) =>
        (await RouteAsync(poolId, cancellationToken)).Database.Name;

    public async Task<(PoolUpsertResult Result, string Database)> UpsertPoolAsync(string poolId, PoolSettings settings, string? database, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);

        // Always the directory itself, never a cached route: an instance that missed a move must
        // not create the pool again where it was.
        var target = await PlaceAsync(poolId, database, cancellationToken);
        target.EnsureStarted();
        var result = await target.Store.UpsertPoolAsync(poolId, settings, cancellationToken);

        // And once more after the write: a move that began or ended since the read must not be
        // met by a pool made again where it was, or settings written where it no longer lives
        // (issue 39, #6). A pool this call created there goes again (empty: nothing reached it).
        var entry = await ReadEntryAsync(poolId, cancellationToken);
        if (entry?.MovingTo is not null || (entry?.Database ?? _databases.Default.Name) != target.Name)
        {
            if (result.Created)
            {
                await target.Placement!.RemovePoolIfEmptyAsync(poolId, cancellationToken);
            }

            Forget(poolId);
            throw new AllocatorException(AllocatorErrorKind.Unavailable,
                $"Pool '{poolId}' was being moved while these settings were written; they may not have reached it. Retry: the retry goes where it lives now.",
                outcomeUnknown: !result.Created, innerException: null);
        }

        return (result, target.Name);
    }

    /// <summary>The database of an existing pool, or, for a new one, the database it is now placed on.</summary>
    private async Task<Database> PlaceAsync(string poolId, string? requested, CancellationToken cancellationToken)
    {
        var entry = await ReadEntryAsync(poolId, cancellationToken);
        if (entry is null)
        {
            if (await _databases.Default.Store.GetPoolAsync(poolId, cancellationToken) is not null)
            {
                return Requested(_databases.Default, requested, poolId); // a pool from before the directory
            }

            var chosen = requested is not null ? Resolve(requested, poolId) : await ChooseAsync(cancellationToken);
            chosen.EnsureStarted();
            if (await _databases.Default.Placement!.ReplacePlacementAsync(null, new PoolPlacement(poolId, chosen.Name), cancellationToken))
            {
                return chosen;
            }

            // Another instance placed it first: its choice holds.
            entry = await ReadEntryAsync(poolId, cancellationToken)
                ?? throw new AllocatorException(AllocatorErrorKind.Unavailable, $"Pool '{poolId}' was being placed by another request; retry.", outcomeUnknown: false, innerException: null);
        }

        if (entry.MovingTo is { } target)
        {
            throw PoolMoves.BeingMoved(poolId, entry.Database, target);
        }

        return Requested(Resolve(entry.Database, poolId), requested, poolId);
    }

    private static Database Requested(Database actual, string? requested, string poolId) =>
        requested is null || string.Equals(requested, actual.Name, StringComparison.Ordinal)
            ? actual
            : throw new AllocatorException(AllocatorErrorKind.Conflict,
                $"Pool '{poolId}' lives on database '{actual.Name}', not '{requested}'. To move it (drained and empty): POST /v1/pools/{poolId}/move with {{\"database\":\"{requested}\"}}.");

    /// <summary>The placement rule for a new pool that names no database: the started database with the fewest pools; the default first among equals, then configuration order.</summary>
    private async Task<Database> ChooseAsync(CancellationToken cancellationToken)
    {
        var counts = await _databases.Default.Placement!.CountPoolsAsync(_databases.Default.Name, cancellationToken);
        return _databases.All.Where(d => d.NotStarted is null).OrderBy(d => counts.GetValueOrDefault(d.Name)).FirstOrDefault()
            ?? throw new AllocatorException(AllocatorErrorKind.Unavailable, "No database is available for a new pool; nothing was written.", outcomeUnknown: false, innerException: null);
    }

    public Task<PoolMove> MoveAsync(string poolId, string database, CancellationToken cancellationToken) =>
        _moves.MoveAsync(poolId, database, cancellationToken);

    public void Dispose() => _directoryChanges.Dispose();

    private sealed class Subscriptions(IReadOnlyList<IDisposable> all) : IDisposable
    {
        public void Dispose()
        {
            foreach (var subscription in all)
            {
                subscription.Dispose();
            }
        }
    }
}
