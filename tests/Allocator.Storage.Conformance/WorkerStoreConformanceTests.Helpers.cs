namespace Allocator.Storage.Conformance;

/// <summary>Small shared helpers: unique pools, workers, requests, bounded waits and invariant checks.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    /// <summary>How long a call that must not wait for a lock may take at most (generous for a busy machine).</summary>
    private static readonly TimeSpan NoWaitBound = TimeSpan.FromSeconds(3);

    /// <summary>How long a call that must be blocked is watched before asserting it has not completed.</summary>
    private static readonly TimeSpan StillBlockedAfter = TimeSpan.FromMilliseconds(300);

    /// <summary>Upper bound for anything that should complete (concurrent storms, woken waiters, notifications).</summary>
    private static readonly TimeSpan CompletionBound = TimeSpan.FromSeconds(20);

    /// <summary>Upper bound for an asynchronous pool-change notification (PostgreSQL delivers it via LISTEN/NOTIFY).</summary>
    private static readonly TimeSpan NotificationBound = TimeSpan.FromSeconds(5);

    /// <summary>A pool id no other test uses, so tests never see each other's workers.</summary>
    private static string NewPoolId() => $"pool-{Guid.NewGuid():N}";

    /// <summary>A session key no other request uses.</summary>
    private static string NewSessionKey() => $"session-{Guid.NewGuid():N}";

    /// <summary>Worker ids that sort ordinally in index order (w-00, w-01, …).</summary>
    private static string WorkerId(int index) => $"w-{index:D2}";

    private static AllocationRequest Request(int units = 1, IReadOnlyList<string>? tags = null, TimeSpan? lease = null, string? sessionKey = null) =>
        new(sessionKey ?? NewSessionKey(), units, tags, lease);

    private static WorkerRegistration Registration(string workerId, int capacity, params string[] tags) =>
        new(workerId, $"{workerId}.example:7000", capacity, tags);

    /// <summary>Creates a pool with a unique id.</summary>
    private async Task<string> CreatePoolAsync(PoolSettings? settings = null)
    {
        var poolId = NewPoolId();
        var result = await Store.UpsertPoolAsync(poolId, settings ?? PoolSettings.Default);
        result.Created.Should().BeTrue("pool {0} is new", poolId);
        return poolId;
    }

    /// <summary>Creates a pool with <paramref name="workers"/> workers (<see cref="WorkerId"/>) of <paramref name="capacity"/> slots each.</summary>
    private async Task<string> CreatePoolWithWorkersAsync(int workers, int capacity, PoolSettings? settings = null)
    {
        var poolId = await CreatePoolAsync(settings);
        await RegisterAsync(poolId, [.. Enumerable.Range(0, workers).Select(i => Registration(WorkerId(i), capacity))]);
        return poolId;
    }

    /// <summary>Registers workers and asserts each was created.</summary>
    private async Task<IReadOnlyList<RegistrationOutcome>> RegisterAsync(string poolId, params WorkerRegistration[] registrations)
    {
        var outcomes = await Store.RegisterWorkersAsync(poolId, registrations);
        outcomes.Should().HaveCount(registrations.Length);
        outcomes.Should().OnlyContain(o => o.Status == RegistrationStatus.Created, "every worker registered here is new");
        return outcomes;
    }

    /// <summary>The registration epoch a worker got, found by id (outcome order is not part of the contract).</summary>
    private static long EpochOf(IReadOnlyList<RegistrationOutcome> outcomes, string workerId) =>
        outcomes.Single(o => o.WorkerId == workerId).Worker.Epoch;

    private async Task<AllocationOutcome> AllocateOneAsync(string poolId, AllocationRequest request)
    {
        var outcomes = await Store.AllocateAsync(poolId, [request]);
        outcomes.Should().ContainSingle();
        return outcomes[0];
    }

    /// <summary>Allocates one request and asserts it was newly allocated.</summary>
    private async Task<Allocation> AllocateAsync(string poolId, int units = 1, IReadOnlyList<string>? tags = null, TimeSpan? lease = null, string? sessionKey = null)
    {
        var request = Request(units, tags, lease, sessionKey);
        var outcome = await AllocateOneAsync(poolId, request);
        outcome.Status.Should().Be(AllocationStatus.Allocated, "pool {0} has an eligible worker with {1} free slot(s)", poolId, units);
        var allocation = outcome.Allocation!;
        allocation.PoolId.Should().Be(poolId);
        allocation.SessionKey.Should().Be(request.SessionKey);
        allocation.Units.Should().Be(units);
        allocation.IsActive.Should().BeTrue();
        return allocation;
    }

    /// <summary>Allocates one slot and returns the worker that got it.</summary>
    private async Task<string> AllocateWorkerIdAsync(string poolId, int units = 1, IReadOnlyList<string>? tags = null) =>
        (await AllocateAsync(poolId, units, tags)).WorkerId;

    private async Task<Worker> GetWorkerAsync(string poolId, string workerId)
    {
        var worker = await Store.GetWorkerAsync(poolId, workerId);
        worker.Should().NotBeNull("worker {0} is registered in pool {1}", workerId, poolId);
        return worker!;
    }

    /// <summary>Loads of every worker of a pool, by worker id.</summary>
    private async Task<Dictionary<string, int>> LoadsAsync(string poolId) =>
        (await Store.GetWorkersAsync(poolId)).ToDictionary(w => w.WorkerId, w => w.Load, StringComparer.Ordinal);

    /// <summary>Everything observable about a pool, for "nothing changed" assertions.</summary>
    private async Task<PoolSnapshot> SnapshotAsync(string poolId) =>
        new(await Store.GetPoolStatisticsAsync(poolId), await Store.GetWorkersAsync(poolId));

    /// <summary>
    /// Invariant 1: every worker has 0 ≤ load ≤ capacity and its load equals the units of the
    /// given active allocations on it; the pool's active allocation count matches.
    /// </summary>
    private async Task AssertLoadsMatchAsync(string poolId, IEnumerable<Allocation> activeAllocations)
    {
        var active = activeAllocations.ToList();
        active.Select(a => a.AllocationId).Should().OnlyHaveUniqueItems("an allocation id belongs to one allocation");
        var unitsByWorker = active.GroupBy(a => a.WorkerId, StringComparer.Ordinal).ToDictionary(g => g.Key, g => g.Sum(a => a.Units), StringComparer.Ordinal);
        var workers = await Store.GetWorkersAsync(poolId);
        foreach (var worker in workers)
        {
            worker.Load.Should().BeInRange(0, worker.Capacity, "worker {0} must never exceed its capacity", worker.WorkerId);
            worker.Load.Should().Be(unitsByWorker.GetValueOrDefault(worker.WorkerId), "the load of worker {0} equals the units of its active allocations", worker.WorkerId);
        }

        unitsByWorker.Keys.Should().BeSubsetOf(workers.Select(w => w.WorkerId), "allocations land only on registered workers");
        var statistics = await Store.GetPoolStatisticsAsync(poolId);
        statistics.ActiveAllocations.Should().Be(active.Count);
        statistics.Load.Should().Be(active.Sum(a => (long)a.Units));
    }

    /// <inheritdoc cref="TaskLimit.WithinAsync{T}(Task{T}, TimeSpan, string)"/>
    private static Task<T> WithinAsync<T>(Task<T> task, TimeSpan timeout, string awaited) => TaskLimit.WithinAsync(task, timeout, awaited);

    /// <inheritdoc cref="TaskLimit.WithinAsync{T}(Task{T}, TimeSpan, string)"/>
    private static Task WithinAsync(Task task, TimeSpan timeout, string awaited) => TaskLimit.WithinAsync(task, timeout, awaited);

    /// <summary>
    /// The one bounded "not completed yet" check: gives <paramref name="task"/> <see cref="StillBlockedAfter"/>
    /// to finish and asserts that it did not (it must be waiting for a lock).
    /// </summary>
    private static async Task AssertStillBlockedAsync(Task task, string because)
    {
        await Task.WhenAny(task, Task.Delay(StillBlockedAfter));
        if (task.IsFaulted)
        {
            await task;
        }

        task.IsCompleted.Should().BeFalse(because);
    }

    /// <inheritdoc cref="ConformanceSupport.RunTogetherAsync{T}(int, Func{int, Task{T}}, TimeSpan)"/>
    private static Task<T[]> RunTogetherAsync<T>(int count, Func<int, Task<T>> caller) => ConformanceSupport.RunTogetherAsync(count, caller, CompletionBound);

    /// <summary>A pool's statistics and workers at one moment.</summary>
    private sealed record PoolSnapshot(PoolStatistics Statistics, IReadOnlyList<Worker> Workers);
}
