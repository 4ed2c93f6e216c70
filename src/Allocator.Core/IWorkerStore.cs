namespace Allocator;

/// <summary>
/// The storage seam: everything Allocator asks of a database, in the domain's terms. The
/// database is the single source of truth; every method is safe to call concurrently from many
/// callers and from many service instances sharing one database.
/// </summary>
/// <remarks>
/// Argument errors (bad ids, units, capacities, batch sizes) throw <see cref="ArgumentException"/>
/// before anything is written. A pool-scoped call on a pool that does not exist throws
/// <see cref="AllocatorException"/> with <see cref="AllocatorErrorKind.NotFound"/>.
/// Pool change notifications are a separate seam, <see cref="IPoolChangeFeed"/>.
/// </remarks>
public interface IWorkerStore
{
    /// <summary>Short name of the store (<c>memory</c>, <c>postgres</c>, <c>sqlserver</c>), for logs and telemetry.</summary>
    string Name { get; }

    /// <summary>
    /// How many statements the store can run at once: its connection pool's size, each statement
    /// holding one connection. Null when it does not say or its statements hold none each (in
    /// memory; Npgsql multiplexing). The grains keep their batches in flight below it, so that
    /// batches wait in the grain, still gathering, rather than for a connection.
    /// </summary>
    int? ConnectionLimit => null;

    Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default);

    /// <returns>The pool, or <see langword="null"/> when it does not exist.</returns>
    Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default);

    Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default);

    /// <summary>
    /// Creates or updates workers in one batch. Rows are locked in (pool, worker id) order so
    /// concurrent batches cannot deadlock one another; each worker gets its own outcome.
    /// </summary>
    Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default);

    Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default);

    /// <summary>Drain (<see cref="WorkerState.Draining"/>), undrain (<see cref="WorkerState.Available"/>) or take offline.</summary>
    Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default);

    /// <summary>Records a heartbeat (database time) and, when given, the worker's own load index (0–10000).</summary>
    /// <param name="epoch">The worker's registration epoch; a stale one changes nothing.</param>
    Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default);

    Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default);

    /// <summary>All workers of a pool ordered by worker id (for statistics, audits and tests; not for hot paths).</summary>
    Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default);

    /// <summary>
    /// Allocates a batch of requests in one commit: each request gets the least-loaded eligible
    /// worker with room, seeing the batch's earlier picks (water filling). Requests whose session
    /// key already has an active allocation get it back unchanged. Outcomes are in request order.
    /// </summary>
    Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default);

    /// <summary>
    /// <see cref="AllocateAsync(string, IReadOnlyList{AllocationRequest}, CancellationToken)"/>, telling
    /// each request's outcome through <paramref name="onCommitted"/> (request index, outcome) as
    /// soon as the statement that decided it has committed: the first skip-locked statement
    /// decides most of a batch, retries and the blocking fallback come later, so a grain can answer
    /// those callers early. Called exactly once per request, at the latest just before the call
    /// returns; the returned list holds the same outcomes. Once anything of the batch committed,
    /// a later failure no longer throws: the requests it left undecided answer
    /// <see cref="AllocationStatus.Unavailable"/> (with <see cref="AllocationOutcome.OutcomeUnknown"/>
    /// when the failed statement may have committed).
    /// </summary>
    /// <remarks>The default implementation (for wrappers) reports every outcome when the call completes.</remarks>
    async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken)
    {
        var outcomes = await AllocateAsync(poolId, requests, cancellationToken).ConfigureAwait(false);
        for (var i = 0; onCommitted is not null && i < outcomes.Count; i++)
        {
            onCommitted(i, outcomes[i]);
        }

        return outcomes;
    }

    /// <summary>Ends an allocation and frees its slots, if <paramref name="epoch"/> is current, whoever owns it (operators, tests; brokers release through the batch, with their owner).</summary>
    Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default);

    /// <summary>
    /// Ends a batch of allocations in one commit (group commit of releases: one statement and one
    /// commit for many callers instead of one each). The batch behaves exactly as the single
    /// releases applied one after another in request order inside one transaction, so each item
    /// gets the answer <see cref="ReleaseAsync(string, Guid, long, CancellationToken)"/> would have
    /// given it; an allocation id repeated in the batch is released by its first occurrence (when
    /// its epoch is current) and the later ones answer as a second release would
    /// (<see cref="LeaseStatus.NotActive"/>). Rows are locked allocation id first, then worker id,
    /// so concurrent batches never deadlock one another.
    /// </summary>
    /// <returns>One result per release, in request order.</returns>
    /// <exception cref="ArgumentException">The batch is empty or holds more than <see cref="AllocatorLimits.MaxBatchSize"/> releases; nothing was written.</exception>
    Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default);

    /// <summary>
    /// Extends an allocation's lease from now (database time) and advances its epoch, if
    /// <paramref name="epoch"/> is current. <paramref name="lease"/> <see langword="null"/> takes the pool's default lease.
    /// </summary>
    /// <param name="owner">
    /// The principal renewing: another owner's allocation is answered <see cref="LeaseStatus.NotFound"/>,
    /// exactly as one that does not exist; one without an owner may be renewed by anyone.
    /// <see langword="null"/>: any owner.
    /// </param>
    Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default);

    /// <summary>
    /// A new activation of the pool's grain takes the pool over from every earlier one (issue 47):
    /// the store records a new activation fence for the pool and returns it, different from every
    /// fence it returned before for the pool. A statement an earlier activation sends with its own
    /// fence from then on changes nothing (<see cref="ReleaseAbandonedAsync"/>): an activation
    /// superseded while its instance hung cannot undo what its successor answered. A pool that
    /// does not exist has no fence to take: 0.
    /// </summary>
    /// <remarks>
    /// A store that keeps no fences returns 0 and releases as <see cref="ReleaseAsync(string, IReadOnlyList{LeaseRelease}, CancellationToken)"/>
    /// does (the default): activations are then not told apart.
    /// </remarks>
    Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) => Task.FromResult(0L);

    /// <summary>
    /// Ends an allocation the pool's grain made for a caller who gave up before it was answered
    /// (its slots would otherwise be held by nobody until its lease ends), as one release of a
    /// batch would, but only while <paramref name="fence"/> is still the pool's activation fence
    /// (<see cref="ClaimPoolActivationAsync"/>). Once a later activation has claimed the pool, it
    /// may have answered a retry of the same key with this allocation: the release changes nothing
    /// and is answered <see cref="LeaseStatus.StaleEpoch"/>, the allocation left to its holder.
    /// </summary>
    Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default) =>
        ReleaseOneAsync(this, poolId, release, cancellationToken);

    /// <summary>
    /// <see cref="AllocateAsync(string, IReadOnlyList{AllocationRequest}, Action{int, AllocationOutcome}?, CancellationToken)"/>,
    /// but only while <paramref name="fence"/> is still the pool's activation fence
    /// (<see cref="ClaimPoolActivationAsync"/>), which each statement checks before it allocates.
    /// Once a later activation has claimed the pool, nothing more is allocated: an activation
    /// superseded while its instance hung must not, on waking, take slots for callers who have been
    /// answered elsewhere or have gone (issue 47). A pool that does not exist is answered as the
    /// call without a fence answers it.
    /// </summary>
    /// <returns>
    /// The outcomes, or <see langword="null"/> when the fence was stale before anything of the batch
    /// was allocated: nothing was written. When it goes stale between statements of one batch (a
    /// retry, the blocking fallback), the requests already decided keep their outcomes and the
    /// others answer <see cref="AllocationStatus.Unavailable"/>, nothing written for them.
    /// </returns>
    /// <remarks>A store that keeps no fences (the default) allocates as the call without a fence does.</remarks>
    async Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        await AllocateAsync(poolId, requests, onCommitted, cancellationToken).ConfigureAwait(false);

    private static async Task<LeaseResult> ReleaseOneAsync(IWorkerStore store, string poolId, LeaseRelease release, CancellationToken cancellationToken) =>
        (await store.ReleaseAsync(poolId, [release], cancellationToken))[0];

    /// <summary>
    /// One allocation of the pool, active or ended (until its history is purged), with how it
    /// ended (<see cref="Allocation.EndReason"/>); <see langword="null"/> when there is none.
    /// </summary>
    Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default);

    /// <summary>
    /// The allocation <paramref name="sessionKey"/> holds in the pool, as <paramref name="owner"/>'s
    /// key (null: a key without an owner), as an allocate with the key would answer it: the active
    /// one, else the latest that ended within the history retention (with how it ended);
    /// <see langword="null"/> when there is none. How a request naming several pools finds where an
    /// earlier attempt with its key allocated before it allocates anywhere (ADR 0036).
    /// </summary>
    /// <exception cref="AllocatorException">The pool does not exist (<see cref="AllocatorErrorKind.NotFound"/>).</exception>
    Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default);

    /// <summary>
    /// Ends up to <paramref name="maxCount"/> allocations whose lease has expired (database time)
    /// and frees their slots. Concurrent reapers never end the same allocation twice.
    /// </summary>
    /// <returns>The allocations this call ended.</returns>
    Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default);
}
