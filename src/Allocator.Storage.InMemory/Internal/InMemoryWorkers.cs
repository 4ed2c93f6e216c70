namespace Allocator.Storage.InMemory.Internal;

/// <summary>
/// The worker operations of the in-memory store: register (create or update a batch),
/// deregister, set state (drain, undrain, offline), report load, read one or all.
/// </summary>
internal sealed class InMemoryWorkers(InMemoryStoreContext context)
{
    public Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsureRegistrations(workers);
        var outcomes = new RegistrationOutcome[workers.Count];
        var anyFreed = false;
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            var now = context.Time.GetUtcNow();
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
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult<IReadOnlyList<RegistrationOutcome>>(outcomes);
    }

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool); // ended at their expiry, before the worker left
            if (!pool.Workers.Remove(workerId, out var removed))
            {
                return Task.FromResult(new DeregistrationResult(false, 0));
            }

            pool.RetiredEpochs[workerId] = removed.Epoch;

            var now = context.Time.GetUtcNow();
            var ended = 0;
            foreach (var allocation in pool.ActiveBySession.Values.Where(a => a.WorkerId == workerId).ToList())
            {
                InMemoryStoreContext.EndAllocation(pool, allocation, now, AllocationEndReason.WorkerDeregistered, releaseLoad: false);
                ended++;
            }

            return Task.FromResult(new DeregistrationResult(true, ended));
        }
    }

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        if (!Enum.IsDefined(state))
        {
            throw new ArgumentOutOfRangeException(nameof(state), state, "Unknown worker state.");
        }

        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            if (!pool.Workers.TryGetValue(workerId, out var row))
            {
                return Task.FromResult(WorkerUpdateStatus.NotFound);
            }

            row.State = state;
        }

        if (state == WorkerState.Available)
        {
            context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        }

        return Task.FromResult(WorkerUpdateStatus.Ok);
    }

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        if (AllocatorValidation.CheckLoadIndex(loadIndex) is { } error)
        {
            throw new ArgumentOutOfRangeException(nameof(loadIndex), loadIndex, error);
        }

        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            if (!pool.Workers.TryGetValue(workerId, out var row))
            {
                return Task.FromResult(WorkerUpdateStatus.NotFound);
            }

            if (row.Epoch != epoch)
            {
                return Task.FromResult(WorkerUpdateStatus.StaleEpoch);
            }

            row.LastHeartbeat = context.Time.GetUtcNow();
            if (loadIndex is not null)
            {
                row.ReportedLoadIndex = loadIndex;
            }
        }

        context.Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
        return Task.FromResult(WorkerUpdateStatus.Ok);
    }

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsureWorkerId(workerId);
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            return Task.FromResult(pool.Workers.TryGetValue(workerId, out var row) ? row.Snapshot() : null);
        }
    }

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken)
    {
        lock (context.Sync)
        {
            var pool = context.FindPool(poolId);
            context.EndExpired(pool);
            IReadOnlyList<Worker> workers = [.. pool.Workers.Values.OrderBy(w => w.WorkerId, StringComparer.Ordinal).Select(w => w.Snapshot())];
            return Task.FromResult(workers);
        }
    }

    private static string[] NormalizeTags(IReadOnlyList<string>? tags) =>
        tags is null ? [] : [.. tags.Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal)];
}
