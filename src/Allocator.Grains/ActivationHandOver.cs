using Allocator.Grains.Serialization;

namespace Allocator.Grains;

/// <summary>
/// What a pool grain's activation does with what it holds when it stops taking calls (its silo
/// stops, Orleans deactivates it, or it moves to another silo): answers its queued and parked
/// callers at once, still sends the releases it owes, lets the batches in the store finish and
/// answer, and hands its promises to the next activation (<see cref="PoolGrainHandOver"/>).
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: the grain's turns only.
/// The grain keeps the Orleans side: when to stop, the placement hint, and the migration itself.
/// </remarks>
/// <param name="releaseBatches">Sends the releases the grain owes, and answers its releases.</param>
/// <param name="stopFeeds">Ends what brings news to the grain: the change-feed subscription and its timers.</param>
/// <param name="abort">Canceled when Orleans stops waiting: the store calls in flight end.</param>
internal sealed class ActivationHandOver(
    ActivationStage stage,
    CapacityWaiters waiters,
    GroupCommitQueue<PendingAllocation> allocations,
    GroupCommitQueue<PendingRelease> releases,
    ReleaseBatchRunner releaseBatches,
    CallerReplies replies,
    Action stopFeeds,
    CancellationTokenSource abort)
{
    /// <summary>
    /// Refuses new calls and answers every queued and parked caller: "moved, nothing was done"
    /// when the grain is moving to another silo (the caller sends the call again), otherwise
    /// "unavailable, nothing was done"; batches already in the store go on. Once only: the first
    /// call decides which.
    /// </summary>
    public void StopAccepting(bool handingOver)
    {
        if (!stage.Stop(handingOver))
        {
            return;
        }

        stopFeeds();
        foreach (var waiter in waiters.TakeAll())
        {
            replies.Fail(waiter, stage.StopAnswer());
        }

        foreach (var pending in allocations.Stop())
        {
            replies.Fail(pending, stage.StopAnswer());
        }

        foreach (var release in releases.Stop())
        {
            if (release.AbandonedKey is not null)
            {
                // Nobody will send this one again: its caller is gone (issue 39, #1).
                releaseBatches.ReleaseDirectly(release);
            }
            else
            {
                releaseBatches.Fail(release, stage.StopAnswer());
            }
        }

        // Retries held back behind a release of their key: that release still settles (it is
        // in the store), and lets them go on to hear "moved" or "stopping" (AllocationBatchRunner.Resume).
    }

    /// <summary>
    /// Deactivating, after <see cref="StopAccepting"/>: batches in flight may commit, so they
    /// finish and answer, as do the releases sent directly, unless Orleans stops waiting first.
    /// </summary>
    /// <param name="orleansStopsWaiting">Canceled at Orleans' deactivation timeout.</param>
    public async Task FinishInFlightAsync(CancellationToken orleansStopsWaiting)
    {
        try
        {
            await Task.WhenAll(allocations.WhenInFlightDoneAsync(), releases.WhenInFlightDoneAsync()).WaitAsync(orleansStopsWaiting);
            await releaseBatches.WhenDirectReleasesDoneAsync().WaitAsync(orleansStopsWaiting);
        }
        catch (OperationCanceledException)
        {
            // Orleans stopped waiting (its deactivation timeout): the grain's next activation may
            // already answer calls, a retry of a key in flight here among them. From now on this
            // activation releases nothing it took for abandoned (issue 39, #4): a batch settling
            // late here could end an allocation that activation just answered as held. Such an
            // allocation is left to its lease. Callers hear "outcome unknown" before the store
            // calls are canceled, so a canceled call cannot answer them "nothing was written".
            stage.OrleansGaveUp();
            foreach (var pending in allocations.InFlightItems)
            {
                replies.Fail(pending, GrainErrors.OutcomeUnknown("the pool grain was stopped while the batch was in the store"));
            }

            foreach (var release in releases.InFlightItems)
            {
                releaseBatches.Fail(release, GrainErrors.OutcomeUnknown("the pool grain was stopped while the batch was in the store"));
            }

            await abort.CancelAsync();
        }
    }

    /// <summary>
    /// Moving (live migration): what the next activation must know to keep this one's promises,
    /// or <see langword="null"/> when there is nothing; everything else has settled by now.
    /// </summary>
    /// <remarks>Static, as <see cref="TakeOver"/> is.</remarks>
    public static PoolGrainHandOver? ToCarry(AbandonedKeys abandoned, DateTimeOffset now)
    {
        var replays = abandoned.Replays(now);
        return replays.Count > 0 ? new PoolGrainHandOver([.. replays.Select(r => r.Key)], [.. replays.Select(r => r.At)]) : null;
    }

    /// <summary>
    /// Arrived from a move: takes over what the previous activation handed on. Static: Orleans
    /// rehydrates an activation before its <c>OnActivateAsync</c>, when only what the grain's
    /// constructor made exists.
    /// </summary>
    public static void TakeOver(AbandonedKeys abandoned, PoolGrainHandOver handOver) =>
        abandoned.RememberReplays(handOver.ReplayedKeys.Zip(handOver.ReplayedAt));
}
