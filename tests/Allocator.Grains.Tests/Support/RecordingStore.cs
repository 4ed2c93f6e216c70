using System.Diagnostics;
using Allocator.Storage.InMemory;

namespace Allocator.Grains.Tests.Support;

/// <summary>
/// An <see cref="IWorkerStore"/> over the in-memory store that records batches and, when told,
/// holds each batch in the store until the test releases it (to prove overlap).
/// </summary>
internal sealed class RecordingStore(InMemoryWorkerStore inner) : IWorkerStore, IPoolChangeFeed
{
    private readonly object _sync = new();
    private readonly List<int> _allocateBatches = [];
    private readonly List<AllocationRequest> _allocateRequests = [];
    private readonly List<IReadOnlyList<string>> _registrationBatches = [];
    private readonly List<TaskCompletionSource<BlockedCall>> _blockedAllocates = [];
    private readonly List<TaskCompletionSource<BlockedCall>> _blockedRegistrations = [];
    private readonly List<string?> _allocateParents = [];
    private readonly List<int> _releaseBatches = [];
    private readonly List<TaskCompletionSource<BlockedCall>> _blockedReleases = [];
    private int _subscriptions;
    private int _allocatesInStore;

    public string Name => "recording";

    /// <summary>What the store says of its connections (the grains' store slots follow it).</summary>
    public int? ConnectionLimit { get; set; }

    public InMemoryWorkerStore Inner => inner;

    /// <summary>When set, every allocation batch waits in the store until released.</summary>
    public bool BlockAllocations { get; set; }

    /// <summary>A blocked allocation batch stays blocked when its caller cancels (a statement already sent, whose answer comes when it comes).</summary>
    public bool BlockedAllocationsIgnoreCancellation { get; set; }

    /// <summary>When set, every registration batch waits in the store until released.</summary>
    public bool BlockRegistrations { get; set; }

    /// <summary>When set, every release batch waits in the store until released.</summary>
    public bool BlockReleases { get; set; }

    /// <summary>When set, reads of a pool (its settings) fail as an unreachable database does.</summary>
    public bool FailPoolReads { get; set; }

    /// <summary>While set, reads of a pool (its settings) wait in the store.</summary>
    public bool BlockPoolReads { get; set; }

    /// <summary>When set, reads of one allocation fail as an unreachable database does.</summary>
    public bool FailAllocationReads { get; set; }

    /// <summary>When set, pool change notifications are lost (as a dropped LISTEN connection would lose them).</summary>
    public bool SuppressNotifications { get; set; }

    public int Subscriptions => Volatile.Read(ref _subscriptions);

    public int MaxAllocatesInStore { get; private set; }

    /// <summary>Allocation batches in the store now.</summary>
    public int AllocatesInStore
    {
        get
        {
            lock (_sync)
            {
                return _allocatesInStore;
            }
        }
    }

    public IReadOnlyList<int> AllocateBatches
    {
        get
        {
            lock (_sync)
            {
                return [.. _allocateBatches];
            }
        }
    }

    /// <summary>Sizes of the release batches that reached the store, in arrival order.</summary>
    public IReadOnlyList<int> ReleaseBatches
    {
        get
        {
            lock (_sync)
            {
                return [.. _releaseBatches];
            }
        }
    }

    public IReadOnlyList<IReadOnlyList<string>> RegistrationBatches
    {
        get
        {
            lock (_sync)
            {
                return [.. _registrationBatches];
            }
        }
    }

    /// <summary>The operation name of <see cref="Activity.Current"/> when each allocation batch reached the store.</summary>
    public IReadOnlyList<string?> AllocateParents
    {
        get
        {
            lock (_sync)
            {
                return [.. _allocateParents];
            }
        }
    }

    /// <summary>The <paramref name="index"/>-th blocked allocation batch, once it is in the store.</summary>
    public Task<BlockedCall> BlockedAllocate(int index) => Slot(_blockedAllocates, index).Task;

    public Task<BlockedCall> BlockedRelease(int index) => Slot(_blockedReleases, index).Task;

    public Task<BlockedCall> BlockedRegistration(int index) => Slot(_blockedRegistrations, index).Task;

    /// <summary>
    /// When set, an allocation batch reports its outcomes through onCommitted as soon as the inner
    /// store decided them, then waits for this gate before returning (as a batch whose first
    /// statement committed while a retry or fallback still runs).
    /// </summary>
    public TaskCompletionSource? HoldAfterCommit { get; set; }

    /// <summary>Batches commit, then fail as a lost connection does: outcome unknown, nothing reported.</summary>
    public bool LoseAfterCommit { get; set; }

    /// <summary>The requests of every allocation batch, as the grain sent them.</summary>
    public IReadOnlyList<AllocationRequest> AllocateRequests
    {
        get
        {
            lock (_sync)
            {
                return [.. _allocateRequests];
            }
        }
    }

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        (await AllocateFencedAsync(poolId, requests, fence: null, onCommitted, cancellationToken))!;

    /// <summary>Counted, held (<see cref="BlockAllocations"/>) and failed after the commit (<see cref="LoseAfterCommit"/>) as every batch; the fence is the inner store's to check.</summary>
    public Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken) =>
        AllocateFencedAsync(poolId, requests, (long?)fence, onCommitted, cancellationToken);

    public async Task<IReadOnlyList<AllocationOutcome>> AllocateAsync(string poolId, IReadOnlyList<AllocationRequest> requests, CancellationToken cancellationToken = default) =>
        (await AllocateCoreAsync(poolId, requests, fence: null, cancellationToken))!;

    private async Task<IReadOnlyList<AllocationOutcome>?> AllocateFencedAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long? fence, Action<int, AllocationOutcome>? onCommitted, CancellationToken cancellationToken)
    {
        var outcomes = await AllocateCoreAsync(poolId, requests, fence, cancellationToken);
        for (var i = 0; outcomes is not null && i < outcomes.Count; i++)
        {
            onCommitted?.Invoke(i, outcomes[i]);
        }

        if (HoldAfterCommit is { } gate)
        {
            await gate.Task.WaitAsync(cancellationToken);
        }

        return outcomes;
    }

    private async Task<IReadOnlyList<AllocationOutcome>?> AllocateCoreAsync(string poolId, IReadOnlyList<AllocationRequest> requests, long? fence, CancellationToken cancellationToken)
    {
        BlockedCall? blocked = null;
        lock (_sync)
        {
            _allocateBatches.Add(requests.Count);
            _allocateRequests.AddRange(requests);
            _allocateParents.Add(Activity.Current?.OperationName);
            MaxAllocatesInStore = Math.Max(MaxAllocatesInStore, ++_allocatesInStore);
            if (BlockAllocations)
            {
                blocked = new BlockedCall(requests.Count);
                Slot(_blockedAllocates, _blockedAllocates.Count(s => s.Task.IsCompleted)).TrySetResult(blocked);
            }
        }

        try
        {
            if (blocked is not null)
            {
                await blocked.Released.Task.WaitAsync(BlockedAllocationsIgnoreCancellation ? CancellationToken.None : cancellationToken);
            }

            var token = BlockedAllocationsIgnoreCancellation ? CancellationToken.None : cancellationToken;
            var outcomes = fence is { } value
                ? await ((IWorkerStore)inner).AllocateFencedAsync(poolId, requests, value, onCommitted: null, token)
                : await inner.AllocateAsync(poolId, requests, token);
            if (LoseAfterCommit)
            {
                throw new AllocatorException(AllocatorErrorKind.Unavailable, "Injected: the connection broke after the commit.", outcomeUnknown: true, innerException: null);
            }

            return outcomes;
        }
        finally
        {
            lock (_sync)
            {
                _allocatesInStore--;
            }
        }
    }

    public async Task<IReadOnlyList<RegistrationOutcome>> RegisterWorkersAsync(string poolId, IReadOnlyList<WorkerRegistration> workers, CancellationToken cancellationToken = default)
    {
        BlockedCall? blocked = null;
        lock (_sync)
        {
            _registrationBatches.Add([.. workers.Select(w => w.WorkerId)]);
            if (BlockRegistrations)
            {
                blocked = new BlockedCall(workers.Count);
                Slot(_blockedRegistrations, _blockedRegistrations.Count(s => s.Task.IsCompleted)).TrySetResult(blocked);
            }
        }

        if (blocked is not null)
        {
            await blocked.Released.Task.WaitAsync(cancellationToken);
        }

        return await inner.RegisterWorkersAsync(poolId, workers, cancellationToken);
    }

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        Interlocked.Increment(ref _subscriptions);
        var subscription = inner.Subscribe(change =>
        {
            if (!SuppressNotifications)
            {
                handler(change);
            }
        });
        return new Unsubscriber(this, subscription);
    }

    public Task<PoolUpsertResult> UpsertPoolAsync(string poolId, PoolSettings settings, CancellationToken cancellationToken = default) => inner.UpsertPoolAsync(poolId, settings, cancellationToken);

    public async Task<Pool?> GetPoolAsync(string poolId, CancellationToken cancellationToken = default)
    {
        if (FailPoolReads)
        {
            throw new AllocatorException(AllocatorErrorKind.Unavailable, "Injected: the pool could not be read.", outcomeUnknown: false, innerException: null);
        }

        while (BlockPoolReads)
        {
            await Task.Delay(5, cancellationToken);
        }

        return await inner.GetPoolAsync(poolId, cancellationToken);
    }

    public Task<PoolStatistics> GetPoolStatisticsAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetPoolStatisticsAsync(poolId, cancellationToken);

    public Task<DeregistrationResult> DeregisterWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.DeregisterWorkerAsync(poolId, workerId, cancellationToken);

    public Task<WorkerUpdateStatus> SetWorkerStateAsync(string poolId, string workerId, WorkerState state, CancellationToken cancellationToken = default) => inner.SetWorkerStateAsync(poolId, workerId, state, cancellationToken);

    public Task<WorkerUpdateStatus> ReportLoadAsync(string poolId, string workerId, long epoch, int? loadIndex, CancellationToken cancellationToken = default) => inner.ReportLoadAsync(poolId, workerId, epoch, loadIndex, cancellationToken);

    public Task<Worker?> GetWorkerAsync(string poolId, string workerId, CancellationToken cancellationToken = default) => inner.GetWorkerAsync(poolId, workerId, cancellationToken);

    public Task<IReadOnlyList<Worker>> GetWorkersAsync(string poolId, CancellationToken cancellationToken = default) => inner.GetWorkersAsync(poolId, cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken = default) => inner.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

    public async Task<IReadOnlyList<LeaseResult>> ReleaseAsync(string poolId, IReadOnlyList<LeaseRelease> releases, CancellationToken cancellationToken = default)
    {
        await HoldReleaseAsync(releases.Count, cancellationToken);
        return await inner.ReleaseAsync(poolId, releases, cancellationToken);
    }

    private async Task HoldReleaseAsync(int count, CancellationToken cancellationToken)
    {
        BlockedCall? blocked = null;
        lock (_sync)
        {
            _releaseBatches.Add(count);
            if (BlockReleases)
            {
                blocked = new BlockedCall(count);
                Slot(_blockedReleases, _blockedReleases.Count(s => s.Task.IsCompleted)).TrySetResult(blocked);
            }
        }

        if (blocked is not null)
        {
            await blocked.Released.Task.WaitAsync(cancellationToken);
        }
    }

    public Task<long> ClaimPoolActivationAsync(string poolId, CancellationToken cancellationToken = default) => inner.ClaimPoolActivationAsync(poolId, cancellationToken);

    /// <summary>Counted and held (<see cref="BlockReleases"/>) as a release batch of one.</summary>
    public async Task<LeaseResult> ReleaseAbandonedAsync(string poolId, LeaseRelease release, long fence, CancellationToken cancellationToken = default)
    {
        await HoldReleaseAsync(1, cancellationToken);
        return await inner.ReleaseAbandonedAsync(poolId, release, fence, cancellationToken);
    }

    public Task<LeaseResult> RenewAsync(string poolId, Guid allocationId, long epoch, TimeSpan? lease, string? owner = null, CancellationToken cancellationToken = default) => inner.RenewAsync(poolId, allocationId, epoch, lease, owner, cancellationToken);

    public Task<Allocation?> GetAllocationAsync(string poolId, Guid allocationId, CancellationToken cancellationToken = default) =>
        FailAllocationReads
            ? throw new AllocatorException(AllocatorErrorKind.Unavailable, "Injected: the allocation could not be read.", outcomeUnknown: false, innerException: null)
            : inner.GetAllocationAsync(poolId, allocationId, cancellationToken);

    public Task<Allocation?> GetAllocationByKeyAsync(string poolId, string sessionKey, string? owner, CancellationToken cancellationToken = default) =>
        inner.GetAllocationByKeyAsync(poolId, sessionKey, owner, cancellationToken);

    public Task<IReadOnlyList<Allocation>> ReapExpiredAsync(int maxCount, CancellationToken cancellationToken = default) => inner.ReapExpiredAsync(maxCount, cancellationToken);

    private TaskCompletionSource<BlockedCall> Slot(List<TaskCompletionSource<BlockedCall>> slots, int index)
    {
        lock (_sync)
        {
            while (slots.Count <= index)
            {
                slots.Add(new TaskCompletionSource<BlockedCall>(TaskCreationOptions.RunContinuationsAsynchronously));
            }

            return slots[index];
        }
    }

    /// <summary>A batch held in the store.</summary>
    internal sealed class BlockedCall(int size)
    {
        public int Size { get; } = size;

        public TaskCompletionSource Released { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public void Release() => Released.TrySetResult();
    }

    private sealed class Unsubscriber(RecordingStore owner, IDisposable inner) : IDisposable
    {
        private int _disposed;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) == 0)
            {
                inner.Dispose();
                Interlocked.Decrement(ref owner._subscriptions);
            }
        }
    }
}
