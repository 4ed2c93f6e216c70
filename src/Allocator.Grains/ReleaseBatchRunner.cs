using System.Diagnostics;
using Microsoft.Extensions.Logging;

namespace Allocator.Grains;

/// <summary>
/// A pool grain's releases in the store: runs each release batch its queue starts and answers the
/// batch's callers, and releases what a caller that gave up left behind (<see cref="AbandonedKeys"/>),
/// directly, with this activation's fence (<see cref="PoolActivationFence"/>).
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: called from the grain's
/// turns only, and its awaits come back to them (the continuation that forgets a direct release
/// is queued on <paramref name="turns"/>).
/// </remarks>
/// <param name="releases">The grain's release queue.</param>
/// <param name="fence">This activation's claim on the pool: the releases it makes on its own account carry it.</param>
/// <param name="turns">The activation's scheduler: work queued on it runs as a turn of the grain.</param>
/// <param name="logger">The grain's logger (its category and event ids are the grain's).</param>
/// <param name="poolMissing">The store said the pool does not exist.</param>
/// <param name="leaveIfAsked">A batch settled: the grain leaves now if it was asked to once idle.</param>
/// <param name="capacityFreed">A batch released something: the grain's waiters may go on.</param>
/// <param name="stopping">Canceled when Orleans stops waiting for the grain: store calls end.</param>
internal sealed partial class ReleaseBatchRunner(
    string poolId,
    IWorkerStore store,
    TimeProvider time,
    CallerReplies replies,
    AbandonedKeys abandoned,
    GroupCommitQueue<PendingRelease> releases,
    PoolActivationFence fence,
    ActivationStage stage,
    TaskScheduler turns,
    ILogger logger,
    Action poolMissing,
    Action leaveIfAsked,
    Action capacityFreed,
    CancellationToken stopping)
{
    private readonly HashSet<Task> _directReleases = [];

    /// <summary>Releases sent outside the queue and not settled yet.</summary>
    public int DirectInFlight => _directReleases.Count;

    /// <summary>Completes when the releases sent directly by now have settled; deactivation waits for it.</summary>
    public Task WhenDirectReleasesDoneAsync() => Task.WhenAll([.. _directReleases]);

    /// <summary>The queue's batch runner: sends the batch, answers each caller; never throws.</summary>
    /// <returns>The store time, or <see langword="null"/> when the store call failed.</returns>
    public async Task<TimeSpan?> RunAsync(PendingRelease[] batch)
    {
        List<ActivityLink> links = [];
        ActivityContext parent = default;
        foreach (var pending in batch)
        {
            if (pending.Span is { } span)
            {
                links.Add(new ActivityLink(span.Context));
                parent = parent == default ? span.Context : parent;
            }
        }

        GrainTelemetry.ReleaseBatchSize.Record(batch.Length, replies.PoolTag);
        using var batchSpan = StoreBatchSpan.Start(GrainTelemetry.ReleaseBatchSpan, parent, links, poolId, store.Name, batch.Length, releases.Limit.Current);
        var leases = Array.ConvertAll(batch, p => p.Release);
        try
        {
            var started = time.GetTimestamp();
            var results = await StoreBatchSpan.CallStore(batchSpan, () => store.ReleaseAsync(poolId, leases, stopping));
            var storeTime = time.GetElapsedTime(started);
            if (results.Count != batch.Length)
            {
                throw new InvalidOperationException($"The store answered {results.Count} results for a release batch of {batch.Length}.");
            }

            for (var i = 0; i < batch.Length; i++)
            {
                Complete(batch[i], results[i], batch.Length);
            }

            leaveIfAsked();
            if (results.Any(r => r.Status == LeaseStatus.Ok))
            {
                // Capacity this grain freed: wake its waiters now, not after a notification's round trip.
                capacityFreed();
            }

            return storeTime;
        }
        catch (Exception ex)
        {
            batchSpan?.SetStatus(ActivityStatusCode.Error, ex.Message);
            batchSpan?.AddException(ex);
            if (ex is AllocatorException { Kind: AllocatorErrorKind.NotFound })
            {
                poolMissing();
            }

            foreach (var pending in batch)
            {
                Fail(pending, ex);
            }

            return null;
        }
    }

    /// <summary>Releases an allocation whose caller is gone and that no other request for its key claimed.</summary>
    public void ReleaseAbandoned(string key, Allocation allocation)
    {
        if (stage.GivenUpByOrleans)
        {
            // The next activation may have answered a retry of the key with this allocation.
            LogAbandonedLeftAfterTimeout(logger, allocation.AllocationId, poolId);
            abandoned.Released(key);
            return;
        }

        GrainTelemetry.AbandonedReleases.Add(1, replies.PoolTag);
        LogReleasingAbandoned(logger, allocation.AllocationId, poolId);

        // Outside the queue, on its own: it carries this activation's fence, which the store checks
        // (a later activation may have answered a retry of the key with this allocation, issue 47).
        ReleaseDirectly(new PendingRelease(new LeaseRelease(allocation.AllocationId, allocation.Epoch), span: null, abandonedKey: key));
    }

    /// <summary>Sends one release to the store outside the queue; deactivation waits for it (<see cref="WhenDirectReleasesDoneAsync"/>).</summary>
    public void ReleaseDirectly(PendingRelease release)
    {
        var task = ReleaseDirectlyAsync(release);
        _directReleases.Add(task);
        _ = task.ContinueWith(t => _directReleases.Remove(t), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, turns);
    }

    /// <summary>Answers a release with an error; one the grain made itself leaves its allocation to its lease.</summary>
    public void Fail(PendingRelease pending, Exception exception)
    {
        replies.Fail(pending, exception);
        if (pending.AbandonedKey is { } key)
        {
            // Its lease is now the only way its slots come back: say so loudly.
            LogAbandonedReleaseError(logger, exception, pending.Release.AllocationId, poolId);
            abandoned.Released(key);
        }
    }

    private async Task ReleaseDirectlyAsync(PendingRelease release)
    {
        try
        {
            var result = release.AbandonedKey is null
                ? (await store.ReleaseAsync(poolId, [release.Release], CancellationToken.None))[0]
                : await store.ReleaseAbandonedAsync(poolId, release.Release, await fence.EnsureAsync(CancellationToken.None), CancellationToken.None);
            Complete(release, result, batchSize: 1);
            if (result.Status == LeaseStatus.Ok && !stage.Stopping)
            {
                capacityFreed();
            }
        }
        catch (Exception ex)
        {
            Fail(release, ex);
        }
    }

    private void Complete(PendingRelease pending, LeaseResult result, int batchSize)
    {
        replies.Answer(pending, result, batchSize);
        if (pending.AbandonedKey is { } key)
        {
            if (result.Status != LeaseStatus.Ok)
            {
                LogAbandonedReleaseFailed(logger, pending.Release.AllocationId, poolId, result.Status);
            }

            abandoned.Released(key);
        }
    }

    // The method names are the event names, and their hash the event ids: they stay as they were in PoolGrain.
    [LoggerMessage(Level = LogLevel.Warning, Message = "Releasing allocation {AllocationId} in pool {Pool}: its caller gave up while the batch that made it was in the store.")]
    private static partial void LogReleasingAbandoned(ILogger logger, Guid allocationId, string pool);

    [LoggerMessage(Level = LogLevel.Warning, Message = "The release of abandoned allocation {AllocationId} in pool {Pool} answered {Status}: it is left to its holder (StaleEpoch: renewed by a holder, or a later activation of the pool took it over and may have answered a retry with it).")]
    private static partial void LogAbandonedReleaseFailed(ILogger logger, Guid allocationId, string pool, LeaseStatus status);

    [LoggerMessage(Level = LogLevel.Error, Message = "Could not release abandoned allocation {AllocationId} in pool {Pool}; only its lease (if any) frees it now.")]
    private static partial void LogAbandonedReleaseError(ILogger logger, Exception exception, Guid allocationId, string pool);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Leaving abandoned allocation {AllocationId} of pool {Pool} to its lease: Orleans stopped waiting for this activation, and the next one may have answered a retry with it.")]
    private static partial void LogAbandonedLeftAfterTimeout(ILogger logger, Guid allocationId, string pool);
}
