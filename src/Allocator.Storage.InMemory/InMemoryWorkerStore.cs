using Allocator.Storage.InMemory.Internal;

namespace Allocator.Storage.InMemory;

/// <summary>
/// The reference model of <see cref="IWorkerStore"/> and <see cref="IPoolChangeFeed"/>: the same
/// semantics as the database stores, in process memory. Used by fast tests and by the host when
/// no database is configured (<see cref="InMemoryServiceCollectionExtensions.AddAllocatorInMemory"/>).
/// </summary>
/// <remarks>
/// One monitor guards all data, so every operation is atomic like a single SQL statement. Row
/// locks held by "other transactions" are modelled by a semaphore per worker: skip-locked
/// selection passes over a worker whose semaphore is taken, and the blocking fallback and the
/// strict strategy wait for it, outside the monitor, bounded by <see cref="InMemoryWorkerStoreOptions.LockTimeout"/>.
/// Tests take those semaphores with <see cref="HoldRowLockAsync"/> the way a second database
/// connection would take a row lock.
/// <para>
/// The operations live in one class per family, as in the database stores (docs/architecture.md,
/// "Where each operation lives"); they share the monitor and the tables through <see cref="InMemoryStoreContext"/>.
/// </para>
/// </remarks>
public sealed class InMemoryWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolSettingsCache, IPoolPlacementStore
{
    private readonly InMemoryStoreContext _context;
    private readonly InMemoryPools _pools;
    private readonly InMemoryWorkers _workers;
    private readonly InMemoryAllocations _allocations;
    private readonly InMemoryLeases _leases;
    private readonly InMemoryPoolDirectory _directory;

    /// <param name="timeProvider">The store's clock (its "database time"). Default: <see cref="TimeProvider.System"/>.</param>
    /// <param name="options">Options (validated here). Default: <see cref="InMemoryWorkerStoreOptions"/>'s defaults.</param>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public InMemoryWorkerStore(TimeProvider? timeProvider = null, InMemoryWorkerStoreOptions? options = null)
    {
        var time = timeProvider ?? TimeProvider.System;
        options ??= new InMemoryWorkerStoreOptions();
        if (options.Validate() is { Count: > 0 } errors)
        {
            throw new ArgumentException("Invalid in-memory store options: " + string.Join(" ", errors), nameof(options));
        }

        _context = new InMemoryStoreContext(time, options);
        _pools = new InMemoryPools(_context);
        _workers = new InMemoryWorkers(_context);
        _leases = new InMemoryLeases(_context);
        _allocations = new InMemoryAllocations(_context, _leases);
        _directory = new InMemoryPoolDirectory(_context);
    }

    public string Name => "memory";

    // Pools (InMemoryPools)

    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) =>
        _pools.UpsertPoolAsync(poolId, settings, cancellationToken);

    public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolAsync(poolId, cancellationToken);

    /// <summary>The settings as they are now: memory needs no cache (<see cref="IPoolSettingsCache"/>).</summary>
    public async ValueTask<PoolSettings?> GetAsync(string poolId, CancellationToken cancellationToken = default) =>
        (await GetPoolAsync(poolId, cancellationToken).ConfigureAwait(false))?.Settings;

    /// <summary>Nothing cached, nothing to forget.</summary>
    public void Invalidate(string poolId)
    {
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.GetPoolStatisticsAsync(poolId, cancellationToken);

    public Task<PoolRemoval> RemovePoolIfEmptyAsync(string poolId, CancellationToken cancellationToken = default) =>
        _pools.RemovePoolIfEmptyAsync(poolId, cancellationToken);

    // Workers (InMemoryWorkers)

    public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default) =>
        _workers.RegisterWorkersAsync(poolId, workers, cancellationToken);

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        _workers.DeregisterWorkerAsync(poolId, workerId, cancellationToken);

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) =>
        _workers.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) =>
        _workers.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) =>
        _workers.GetWorkerAsync(poolId, workerId, cancellationToken);

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) =>
        _workers.GetWorkersAsync(poolId, cancellationToken);

    // Allocations (InMemoryAllocations)

    public Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        _allocations.AllocateAsync(poolId, requests, cancellationToken);

    public async Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken)
    {
        var outcomes = await _allocations.AllocateAsync(poolId, requests, fence, cancellationToken).ConfigureAwait(false);
        for (var i = 0; onCommitted is not null && outcomes is not null && i < outcomes.Count; i++)
        {
            onCommitted(i, outcomes[i]);
        }

        return outcomes;
    }

    // Leases (InMemoryLeases)

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAsync(poolId, releases, cancellationToken);

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) =>
        _leases.ClaimPoolActivationAsync(poolId, cancellationToken);

    public Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default) =>
        _leases.ReleaseAbandonedAsync(poolId, release, fence, cancellationToken);

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) =>
        _leases.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) =>
        _leases.GetAllocationAsync(poolId, allocationId, cancellationToken);

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) =>
        _leases.GetAllocationByKeyAsync(poolId, sessionKey, owner);

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default) =>
        _leases.ReapExpiredAsync(maxCount, cancellationToken);

    // Pool directory (InMemoryPoolDirectory)

    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken = default) =>
        _directory.GetPlacementAsync(poolId, cancellationToken);

    public Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken = default) =>
        _directory.ReplacePlacementAsync(expected, replacement, cancellationToken);

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken = default) =>
        _directory.CountPoolsAsync(defaultDatabase, cancellationToken);

    // Change feed and start-up

    public IDisposable Subscribe(Action<PoolChanged> handler) => _context.Changes.Subscribe(handler);

    /// <summary>Nothing to migrate or open in memory.</summary>
    public Task InitializeAsync(CancellationToken cancellationToken = default) => Task.CompletedTask;

    // Test hooks

    /// <summary>
    /// Takes a worker's row lock the way another database transaction would, until disposed.
    /// For conformance tests of skip-locked selection and the blocking fallback.
    /// </summary>
    internal async Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId)
    {
        SemaphoreSlim rowLock;
        lock (_context.Sync)
        {
            rowLock = _context.FindPool(poolId).Workers[workerId].RowLock;
        }

        await rowLock.WaitAsync().ConfigureAwait(false);
        return new RowLockHold(rowLock);
    }

    /// <summary>
    /// Moves an allocation's lease expiry one second into the past, as the database stores' test
    /// hooks do with the database clock. For conformance tests of lease expiry.
    /// </summary>
    internal void ExpireLease(string poolId, Guid allocationId) => _leases.ExpireLease(poolId, allocationId);

    private sealed class RowLockHold(SemaphoreSlim rowLock) : IAsyncDisposable
    {
        private int _released;

        public ValueTask DisposeAsync()
        {
            if (Interlocked.Exchange(ref _released, 1) == 0)
            {
                rowLock.Release();
            }

            return ValueTask.CompletedTask;
        }
    }
}
