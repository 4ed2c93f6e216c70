using Allocator.Storage.Internal;

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
/// </remarks>
public sealed class InMemoryWorkerStore : IWorkerStore, IPoolChangeFeed, IPoolSettingsCache
{
    private readonly object _sync = new();
    private readonly Dictionary<string, PoolData> _pools = new(StringComparer.Ordinal);
    private readonly TimeProvider _time;
    private readonly InMemoryWorkerStoreOptions _options;
    private Action<PoolChanged>[] _handlers = [];
    private long _lastEpoch;

    /// <param name="timeProvider">The store's clock (its "database time"). Default: <see cref="TimeProvider.System"/>.</param>
    /// <param name="options">Options (validated here). Default: <see cref="InMemoryWorkerStoreOptions"/>'s defaults.</param>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public InMemoryWorkerStore(TimeProvider? timeProvider = null, InMemoryWorkerStoreOptions? options = null)
    {
        _time = timeProvider ?? TimeProvider.System;
        _options = options ?? new InMemoryWorkerStoreOptions();
        if (_options.Validate() is { Count: > 0 } errors)
        {
            throw new ArgumentException("Invalid in-memory store options: " + string.Join(" ", errors), nameof(options));
        }
    }

    public string Name => "memory";

    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureSettings(settings);
        bool created;
        lock (_sync)
        {
            created = !_pools.TryGetValue(poolId, out var pool);
            if (created)
            {
                _pools[poolId] = new PoolData(poolId, settings);
            }
            else
            {
                pool!.Settings = settings;
            }
        }

        if (!created)
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
        }

        return Task.FromResult(new PoolUpsertResult(new Pool(poolId, settings), created));
    }

    public Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        lock (_sync)
        {
            return Task.FromResult(_pools.TryGetValue(poolId, out var pool) ? new Pool(poolId, pool.Settings) : null);
        }
    }

    /// <summary>The settings as they are now: memory needs no cache (<see cref="IPoolSettingsCache"/>).</summary>
    public async ValueTask<PoolSettings?> GetAsync(string poolId, CancellationToken cancellationToken = default) =>
        (await GetPoolAsync(poolId, cancellationToken).ConfigureAwait(false))?.Settings;

    /// <summary>Nothing cached, nothing to forget.</summary>
    public void Invalidate(string poolId)
    {
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default)
    {
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool);
            var available = pool.Workers.Values.Where(w => w.State == WorkerState.Available).ToList();
            return Task.FromResult(new PoolStatistics
            {
                PoolId = poolId,
                Settings = pool.Settings,
                Workers = pool.Workers.Count,
                AvailableWorkers = available.Count,
                Capacity = pool.Workers.Values.Sum(w => (long)w.Capacity),
                Load = pool.Workers.Values.Sum(w => (long)w.Load),
                FreeSlots = available.Sum(w => (long)(w.Capacity - w.Load)),
                ActiveAllocations = pool.ActiveBySession.Count,
                MinLoad = available.Count == 0 ? 0 : available.Min(w => w.Load),
                MaxLoad = available.Count == 0 ? 0 : available.Max(w => w.Load),
                MinScore = available.Count == 0 ? 0 : available.Min(w => w.Score),
                MaxScore = available.Count == 0 ? 0 : available.Max(w => w.Score),
            });
        }
    }

    public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsureRegistrations(workers);
        var outcomes = new RegistrationOutcome[workers.Count];
        var anyFreed = false;
        lock (_sync)
        {
            var pool = FindPool(poolId);
            var now = _time.GetUtcNow();
            for (var i = 0; i < workers.Count; i++)
            {
                var registration = workers[i];
                var tags = NormalizeTags(registration.Tags);
                if (!pool.Workers.TryGetValue(registration.WorkerId, out var row))
                {
                    row = new WorkerRow(poolId, registration.WorkerId)
                    {
                        Address = registration.Address,
                        Capacity = registration.Capacity,
                        Tags = tags,
                        // An epoch never repeats for a worker id, also across deregistration.
                        Epoch = pool.RetiredEpochs.GetValueOrDefault(registration.WorkerId) + 1,
                        LastHeartbeat = now,
                    };
                    pool.Workers.Add(row.WorkerId, row);
                    outcomes[i] = new RegistrationOutcome(row.WorkerId, RegistrationStatus.Created, row.Snapshot());
                    anyFreed = true;
                }
                else if (registration.Capacity < row.Load)
                {
                    outcomes[i] = new RegistrationOutcome(row.WorkerId, RegistrationStatus.CapacityBelowLoad, row.Snapshot());
                }
                else
                {
                    row.Address = registration.Address;
                    row.Capacity = registration.Capacity;
                    row.Tags = tags;
                    row.Epoch++;
                    row.LastHeartbeat = now;
                    if (row.State == WorkerState.Offline)
                    {
                        row.State = WorkerState.Available;
                    }

                    outcomes[i] = new RegistrationOutcome(row.WorkerId, RegistrationStatus.Updated, row.Snapshot());
                    anyFreed = true;
                }
            }
        }

        if (anyFreed)
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<RegistrationOutcome>>(outcomes);
    }

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool); // ended at their expiry, before the worker left
            if (!pool.Workers.Remove(workerId, out var removed))
            {
                return Task.FromResult(new DeregistrationResult(false, 0));
            }

            pool.RetiredEpochs[workerId] = removed.Epoch;

            var now = _time.GetUtcNow();
            var ended = 0;
            foreach (var allocation in pool.ActiveBySession.Values.Where(a => a.WorkerId == workerId).ToList())
            {
                EndAllocation(pool, allocation, now, releaseLoad: false);
                ended++;
            }

            return Task.FromResult(new DeregistrationResult(true, ended));
        }
    }

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        lock (_sync)
        {
            var pool = FindPool(poolId);
            if (!pool.Workers.TryGetValue(workerId, out var row))
            {
                return Task.FromResult(WorkerUpdateStatus.NotFound);
            }

            row.State = state;
        }

        if (state == WorkerState.Available)
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult(WorkerUpdateStatus.Ok);
    }

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        lock (_sync)
        {
            var pool = FindPool(poolId);
            if (!pool.Workers.TryGetValue(workerId, out var row))
            {
                return Task.FromResult(WorkerUpdateStatus.NotFound);
            }

            if (row.Epoch != epoch)
            {
                return Task.FromResult(WorkerUpdateStatus.StaleEpoch);
            }

            row.LastHeartbeat = _time.GetUtcNow();
            if (loadIndex is not null)
            {
                row.ReportedLoadIndex = loadIndex;
            }
        }

        Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        return Task.FromResult(WorkerUpdateStatus.Ok);
    }

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool);
            return Task.FromResult(pool.Workers.TryGetValue(workerId, out var row) ? row.Snapshot() : null);
        }
    }

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default)
    {
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool);
            IReadOnlyList<Worker> workers = [.. pool.Workers.Values.OrderBy(w => w.WorkerId, StringComparer.Ordinal).Select(w => w.Snapshot())];
            return Task.FromResult(workers);
        }
    }

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureRequests(requests);
        var outcomes = new AllocationOutcome?[requests.Count];
        AllocationStrategy strategy;
        lock (_sync)
        {
            strategy = FindPool(poolId).Settings.Strategy;
        }

        await RunStagesAsync(poolId, strategy, requests, outcomes, [.. Enumerable.Range(0, requests.Count)], cancellationToken).ConfigureAwait(false);

        // An expired lease holds no capacity, reaped or not: end the pool's expired leases and try
        // the requests that found none once more (as the database stores do).
        var full = Enumerable.Range(0, requests.Count).Where(i => outcomes[i]!.Status == AllocationStatus.NoCapacity).ToList();
        if (full.Count > 0 && ReapPool(poolId) > 0)
        {
            foreach (var index in full)
            {
                outcomes[index] = null;
            }

            await RunStagesAsync(poolId, strategy, requests, outcomes, full, cancellationToken).ConfigureAwait(false);
        }

        return outcomes!;
    }

    private async Task RunStagesAsync(string poolId, AllocationStrategy strategy, IReadOnlyList<AllocationRequest> requests, AllocationOutcome?[] outcomes, List<int> indexes, CancellationToken cancellationToken)
    {
        if (strategy != AllocationStrategy.SkipLocked)
        {
            foreach (var i in indexes)
            {
                outcomes[i] = await AllocateBlockingAsync(poolId, requests, outcomes, i, retries: 0, cancellationToken).ConfigureAwait(false);
            }

            return;
        }

        // One pass is one "statement". A request left unanswered found eligible rows that were
        // merely locked: retry in a fresh pass after a jitter, then fall back to blocking; none of
        // that for a request past its deadline (Unavailable, nothing written).
        var retries = 0;
        while (true)
        {
            var pending = RunSkipLockedPass(poolId, requests, outcomes, retries);
            var now = _time.GetUtcNow();
            foreach (var index in pending.Where(i => requests[i].Deadline <= now).ToList())
            {
                outcomes[index] = AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, retries));
                pending.Remove(index);
            }

            if (pending.Count == 0)
            {
                return;
            }

            if (retries == _options.SkipRetries)
            {
                foreach (var index in pending)
                {
                    outcomes[index] = await AllocateBlockingAsync(poolId, requests, outcomes, index, retries, cancellationToken).ConfigureAwait(false);
                }

                return;
            }

            retries++;
            await Task.Delay(Jitter(), _time, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Ends the pool's expired leases; how many.</summary>
    private int ReapPool(string poolId)
    {
        var reaped = 0;
        lock (_sync)
        {
            var pool = FindPool(poolId);
            var now = _time.GetUtcNow();
            reaped = EndExpired(pool);
        }

        if (reaped > 0)
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return reaped;
    }

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default)
    {
        LeaseResult result;
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool);
            result = CheckLease(pool, allocationId, epoch, owner: null, out var allocation);
            if (result.Status == LeaseStatus.Ok)
            {
                var ended = EndAllocation(pool, allocation!, _time.GetUtcNow(), releaseLoad: true);
                result = new LeaseResult(LeaseStatus.Ok, ended);
            }
        }

        if (result.Status == LeaseStatus.Ok)
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult(result);
    }

    public Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        AllocatorValidation.EnsureReleases(releases);
        var results = new LeaseResult[releases.Count];
        var anyReleased = false;
        lock (_sync)
        {
            // Under one monitor, in request order: a repeated id sees the first one's release.
            var pool = FindPool(poolId);
            EndExpired(pool);
            var now = _time.GetUtcNow();
            for (var i = 0; i < releases.Count; i++)
            {
                var result = CheckLease(pool, releases[i].AllocationId, releases[i].Epoch, releases[i].Owner, out var allocation);
                if (result.Status == LeaseStatus.Ok)
                {
                    result = new LeaseResult(LeaseStatus.Ok, EndAllocation(pool, allocation!, now, releaseLoad: true));
                    anyReleased = true;
                }

                results[i] = result;
            }
        }

        if (anyReleased)
        {
            // One notification per batch, as the database stores notify once per statement.
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<LeaseResult>>(results);
    }

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default)
    {
        if (AllocatorValidation.CheckLease(lease) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(lease), lease, error);
        }

        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool); // expired is expired at this call, whether or not the reaper has run
            var result = CheckLease(pool, allocationId, epoch, owner, out var allocation);
            if (result.Status != LeaseStatus.Ok)
            {
                return Task.FromResult(result);
            }

            var effective = lease ?? pool.Settings.DefaultLease;
            var renewed = allocation! with
            {
                Epoch = ++_lastEpoch,
                ExpiresAt = effective is { } l ? _time.GetUtcNow() + l : null,
            };
            pool.Allocations[allocationId] = renewed;
            pool.ActiveBySession[KeyOf(renewed)] = renewed;
            return Task.FromResult(new LeaseResult(LeaseStatus.Ok, renewed));
        }
    }

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default)
    {
        lock (_sync)
        {
            var pool = FindPool(poolId);
            EndExpired(pool);
            return Task.FromResult(pool.Allocations.GetValueOrDefault(allocationId));
        }
    }

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxCount);
        var reaped = new List<Allocation>();
        lock (_sync)
        {
            var now = _time.GetUtcNow();
            var expired = _pools.Values
                .SelectMany(p => p.ActiveBySession.Values.Where(a => a.ExpiresAt <= now).Select(a => (Pool: p, Allocation: a)))
                .OrderBy(x => x.Allocation.ExpiresAt)
                .Take(maxCount)
                .ToList();
            foreach (var (pool, allocation) in expired)
            {
                reaped.Add(EndAllocation(pool, allocation, allocation.ExpiresAt!.Value, releaseLoad: true));
            }

            // The history past its retention is forgotten, as the database stores purge it.
            var cutoff = now - _options.HistoryRetention;
            foreach (var pool in _pools.Values)
            {
                foreach (var old in pool.Allocations.Values.Where(a => a.EndedAt < cutoff).ToList())
                {
                    pool.Allocations.Remove(old.AllocationId);
                    if (pool.EndedBySession.TryGetValue(KeyOf(old), out var latest) && latest.AllocationId == old.AllocationId)
                    {
                        pool.EndedBySession.Remove(KeyOf(old));
                    }
                }
            }
        }

        foreach (var poolId in reaped.Select(a => a.PoolId).Distinct())
        {
            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<Allocation>>(reaped);
    }

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        lock (_sync)
        {
            _handlers = [.. _handlers, handler];
        }

        return new Subscription(this, handler);
    }

    /// <summary>
    /// Takes a worker's row lock the way another database transaction would, until disposed.
    /// For conformance tests of skip-locked selection and the blocking fallback.
    /// </summary>
    internal async Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId)
    {
        SemaphoreSlim rowLock;
        lock (_sync)
        {
            rowLock = FindPool(poolId).Workers[workerId].RowLock;
        }

        await rowLock.WaitAsync().ConfigureAwait(false);
        return new RowLockHold(rowLock);
    }

    /// <summary>
    /// Moves an allocation's lease expiry one second into the past, as the database stores' test
    /// hooks do with the database clock. For conformance tests of lease expiry.
    /// </summary>
    internal void ExpireLease(string poolId, Guid allocationId)
    {
        lock (_sync)
        {
            var pool = FindPool(poolId);
            var expired = pool.Allocations[allocationId] with { ExpiresAt = _time.GetUtcNow() - TimeSpan.FromSeconds(1) };
            pool.Allocations[allocationId] = expired;
            if (expired.IsActive)
            {
                pool.ActiveBySession[KeyOf(expired)] = expired;
            }
        }
    }

    /// <summary>
    /// One non-blocking pass over the requests still unanswered. Returns the indexes of requests
    /// that found no unlocked row although a locked eligible row with room exists.
    /// </summary>
    private List<int> RunSkipLockedPass(string poolId, IReadOnlyList<AllocationRequest> requests, AllocationOutcome?[] outcomes, int retries)
    {
        var pending = new List<int>();
        lock (_sync)
        {
            var pool = FindPool(poolId);
            var now = _time.GetUtcNow();
            for (var i = 0; i < requests.Count; i++)
            {
                if (outcomes[i] is not null)
                {
                    continue;
                }

                var request = requests[i];
                if (FindByKey(pool, StoredSessionKey.Of(request), now) is { } existing)
                {
                    outcomes[i] = new AllocationOutcome(AllocationStatus.Existing, existing, new AllocationDecision(0, 0, 0, false, retries));
                    continue;
                }

                var candidates = EligibleCandidates(pool, request, now);
                if (candidates.Count == 0)
                {
                    outcomes[i] = AllocationOutcome.NoCapacity(new AllocationDecision(0, 0, 0, false, retries));
                    continue;
                }

                var chosen = -1;
                for (var c = 0; c < candidates.Count; c++)
                {
                    if (candidates[c].RowLock.CurrentCount > 0)
                    {
                        chosen = c;
                        break;
                    }
                }

                if (chosen < 0)
                {
                    pending.Add(i);
                    continue;
                }

                var decision = new AllocationDecision(chosen, candidates[chosen].Score - candidates[0].Score, chosen, false, retries);
                outcomes[i] = new AllocationOutcome(AllocationStatus.Allocated, Allocate(pool, candidates[chosen], request, now), decision);
            }

        }

        return pending;
    }

    /// <summary>
    /// Waits for the lock of the true least-loaded eligible worker (no skipping), then allocates
    /// on it. Used by the strict strategy and as the skip-locked strategy's last resort.
    /// </summary>
    private async Task<AllocationOutcome> AllocateBlockingAsync(
        string poolId, IReadOnlyList<AllocationRequest> requests, AllocationOutcome?[] outcomes, int index, int retries, CancellationToken cancellationToken)
    {
        var request = requests[index];
        var deadline = _time.GetUtcNow() + _options.LockTimeout;
        while (true)
        {
            WorkerRow target;
            lock (_sync)
            {
                var pool = FindPool(poolId);
                if (FindByKey(pool, StoredSessionKey.Of(request), _time.GetUtcNow()) is { } existing)
                {
                    return new AllocationOutcome(AllocationStatus.Existing, existing, new AllocationDecision(0, 0, 0, true, retries));
                }

                var candidates = EligibleCandidates(pool, request, _time.GetUtcNow());
                if (candidates.Count == 0)
                {
                    return AllocationOutcome.NoCapacity(new AllocationDecision(0, 0, 0, true, retries));
                }

                target = candidates[0];
                if (target.RowLock.CurrentCount > 0)
                {
                    var outcome = Allocate(pool, target, request, _time.GetUtcNow());
                    return new AllocationOutcome(AllocationStatus.Allocated, outcome, new AllocationDecision(0, 0, 0, true, retries));
                }
            }

            // Wait outside the monitor, as a blocked statement waits without holding anything else.
            var remaining = deadline - _time.GetUtcNow();
            if (remaining <= TimeSpan.Zero || !await target.RowLock.WaitAsync(remaining, cancellationToken).ConfigureAwait(false))
            {
                // Answer this request alone: other requests of the batch may already be committed.
                return new AllocationOutcome(AllocationStatus.Unavailable, null, new AllocationDecision(0, 0, 0, true, retries));
            }

            target.RowLock.Release();
        }
    }

    private static List<WorkerRow> EligibleCandidates(PoolData pool, AllocationRequest request, DateTimeOffset now)
    {
        var freshAfter = pool.Settings.HeartbeatTimeout is { } timeout ? now - timeout : DateTimeOffset.MinValue;
        var candidates = new List<WorkerRow>();
        foreach (var row in pool.Workers.Values)
        {
            if (row.State == WorkerState.Available
                && row.LastHeartbeat >= freshAfter
                && row.Capacity - row.Load >= request.Units
                && (request.RequiredTags is null || request.RequiredTags.All(row.Tags.Contains)))
            {
                candidates.Add(row);
            }
        }

        candidates.Sort(static (a, b) =>
        {
            var byScore = a.Score.CompareTo(b.Score);
            return byScore != 0 ? byScore : string.CompareOrdinal(a.WorkerId, b.WorkerId);
        });
        return candidates;
    }

    private Allocation Allocate(PoolData pool, WorkerRow row, AllocationRequest request, DateTimeOffset now)
    {
        var lease = request.Lease ?? pool.Settings.DefaultLease ?? request.FallbackLease;
        var allocation = new Allocation
        {
            AllocationId = Guid.CreateVersion7(now),
            PoolId = pool.PoolId,
            WorkerId = row.WorkerId,
            Address = row.Address,
            SessionKey = request.SessionKey,
            Owner = request.Owner,
            Units = request.Units,
            Epoch = ++_lastEpoch,
            CreatedAt = now,
            ExpiresAt = lease is { } l ? now + l : null,
        };
        row.Load += request.Units;
        pool.Allocations.Add(allocation.AllocationId, allocation);
        pool.ActiveBySession.Add(KeyOf(allocation), allocation);
        return allocation;
    }

    /// <summary>
    /// Ends the pool's expired leases, each at its expiry. A lease is over at its expiry whether or
    /// not the reaper has run (issue 20, #5), so every call that reads or acts on allocations or
    /// loads does this first: the databases' statements compute the same view without writing.
    /// </summary>
    /// <returns>How many it ended.</returns>
    private int EndExpired(PoolData pool)
    {
        var now = _time.GetUtcNow();
        var ended = 0;
        foreach (var allocation in pool.ActiveBySession.Values.Where(a => a.ExpiresAt <= now).ToList())
        {
            EndAllocation(pool, allocation, allocation.ExpiresAt!.Value, releaseLoad: true);
            ended++;
        }

        return ended;
    }

    private static Allocation EndAllocation(PoolData pool, Allocation allocation, DateTimeOffset now, bool releaseLoad)
    {
        var ended = allocation with { EndedAt = now };
        pool.Allocations[allocation.AllocationId] = ended;
        pool.ActiveBySession.Remove(KeyOf(allocation));
        pool.EndedBySession[KeyOf(allocation)] = ended;
        if (releaseLoad && pool.Workers.TryGetValue(allocation.WorkerId, out var row))
        {
            row.Load -= allocation.Units;
        }

        return ended;
    }

    /// <summary>
    /// The outcome a session key already has: its active allocation, or the one that ended within
    /// <see cref="InMemoryWorkerStoreOptions.HistoryRetention"/> (a replay never allocates twice).
    /// </summary>
    private Allocation? FindByKey(PoolData pool, string sessionKey, DateTimeOffset now) =>
        // An expired lease is over at the statement's clock, reaped or not: never answered as live.
        pool.ActiveBySession.TryGetValue(sessionKey, out var active) ? (active.ExpiresAt <= now ? active with { EndedAt = active.ExpiresAt } : active)
        : pool.EndedBySession.TryGetValue(sessionKey, out var ended) && ended.EndedAt > now - _options.HistoryRetention ? ended
        : null;

    /// <summary>The key of an allocation in the by-key indexes: a session key is its owner's (issue 22).</summary>
    private static string KeyOf(Allocation allocation) => StoredSessionKey.Of(allocation.Owner, allocation.SessionKey);

    /// <param name="owner">The caller's principal: another owner's allocation is answered as a missing one (null: anyone).</param>
    private static LeaseResult CheckLease(PoolData pool, Guid allocationId, long epoch, string? owner, out Allocation? allocation)
    {
        if (!pool.Allocations.TryGetValue(allocationId, out allocation)
            || (owner is not null && allocation.Owner is { } actual && !string.Equals(actual, owner, StringComparison.Ordinal)))
        {
            allocation = null;
            return new LeaseResult(LeaseStatus.NotFound, null);
        }

        if (!allocation.IsActive)
        {
            return new LeaseResult(LeaseStatus.NotActive, allocation);
        }

        return allocation.Epoch != epoch
            ? new LeaseResult(LeaseStatus.StaleEpoch, allocation)
            : new LeaseResult(LeaseStatus.Ok, allocation);
    }

    private PoolData FindPool(string poolId)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return _pools.TryGetValue(poolId, out var pool) ? pool : throw AllocatorException.PoolNotFound(poolId);
    }

    private static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];

    private TimeSpan Jitter() => TimeSpan.FromTicks((long)(Random.Shared.NextDouble() * _options.RetryJitter.Ticks));

    private void Raise(PoolChanged change)
    {
        foreach (var handler in Volatile.Read(ref _handlers))
        {
            handler(change);
        }
    }

    private sealed class PoolData(string poolId, PoolSettings settings)
    {
        public string PoolId { get; } = poolId;
        public PoolSettings Settings { get; set; } = settings;
        public Dictionary<string, WorkerRow> Workers { get; } = new(StringComparer.Ordinal);
        public Dictionary<Guid, Allocation> Allocations { get; } = [];
        public Dictionary<string, Allocation> ActiveBySession { get; } = new(StringComparer.Ordinal);

        /// <summary>The last registration epoch of each deregistered worker id.</summary>
        public Dictionary<string, long> RetiredEpochs { get; } = new(StringComparer.Ordinal);

        /// <summary>The latest ended allocation of each key (the history's index by key).</summary>
        public Dictionary<string, Allocation> EndedBySession { get; } = new(StringComparer.Ordinal);
    }

    private sealed class WorkerRow(string poolId, string workerId)
    {
        public string PoolId { get; } = poolId;
        public string WorkerId { get; } = workerId;
        public required string Address { get; set; }
        public required int Capacity { get; set; }
        public int Load { get; set; }
        public int? ReportedLoadIndex { get; set; }
        public WorkerState State { get; set; } = WorkerState.Available;
        public required string[] Tags { get; set; }
        public required long Epoch { get; set; }
        public required DateTimeOffset LastHeartbeat { get; set; }
        public SemaphoreSlim RowLock { get; } = new(1, 1);
        public long Score => WorkerScore.Compute(Load, Capacity, ReportedLoadIndex);

        public Worker Snapshot() => new()
        {
            PoolId = PoolId,
            WorkerId = WorkerId,
            Address = Address,
            Capacity = Capacity,
            Load = Load,
            ReportedLoadIndex = ReportedLoadIndex,
            State = State,
            Tags = Tags,
            Epoch = Epoch,
            LastHeartbeat = LastHeartbeat,
        };
    }

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

    private sealed class Subscription(InMemoryWorkerStore store, Action<PoolChanged> handler) : IDisposable
    {
        private int _disposed;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0)
            {
                return;
            }

            // Remove this subscription's entry only: another subscription may hold an equal delegate.
            lock (store._sync)
            {
                var index = Array.IndexOf(store._handlers, handler);
                if (index >= 0)
                {
                    store._handlers = [.. store._handlers.AsSpan(0, index), .. store._handlers.AsSpan(index + 1)];
                }
            }
        }
    }
}
