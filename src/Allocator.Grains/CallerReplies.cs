using System.Diagnostics;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>
/// Answers a pool grain's callers, each exactly once, and records every answer where operators
/// look for it: the outcome counter, the duration and queue-wait histograms, and the caller's span.
/// </summary>
/// <remarks>
/// <see cref="GiveUp"/> runs on whatever thread cancels a caller; everything else runs in the
/// grain's turns. Who answers is settled by <see cref="PendingAllocation.TryFinish"/> (and by the
/// completion source of a release), so a cancellation and a batch never both answer one caller.
/// </remarks>
/// <param name="strategy">The pool's strategy when the grain knows it, for the spans.</param>
internal sealed class CallerReplies(string poolId, TimeProvider time, Func<AllocationStrategy?> strategy)
{
    public KeyValuePair<string, object?> PoolTag { get; } = new(AllocatorTelemetry.Tags.Pool, poolId);

    /// <summary>
    /// A span for one caller, a child of the caller's own span (Orleans' server span of the call);
    /// <see cref="Activity.Current"/> is left as it was.
    /// </summary>
    public Activity? StartSpan(string name, int? units)
    {
        var previous = Activity.Current;
        var span = AllocatorTelemetry.ActivitySource.StartActivity(name, ActivityKind.Internal);
        Activity.Current = previous;
        if (span is not null)
        {
            span.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
            if (units is { } u)
            {
                span.SetTag(AllocatorTelemetry.Tags.Units, u);
            }

            TagStrategy(span);
        }

        return span;
    }

    /// <summary>Answers the caller with its outcome, unless it was answered already.</summary>
    /// <summary>Where "no capacity" answers are counted (the grain's demand window), once set.</summary>
    public DemandWindow? Demand { get; set; }

    public void Answer(PendingAllocation pending, AllocationOutcome outcome, int batchSize)
    {
        if (!pending.TryFinish())
        {
            return;
        }

        if (outcome.Status == AllocationStatus.NoCapacity)
        {
            Demand?.Refused(pending.Request.Units);
        }

        pending.CancellationRegistration.Dispose();
        if (outcome.Decision.BlockingFallback)
        {
            GrainTelemetry.Fallbacks.Add(1, PoolTag);
        }

        Record(pending, outcome.Status.ToOutcomeName(), batchSize, outcome, error: null);
        pending.Completion.TrySetResult(outcome);
    }

    /// <summary>
    /// Answers the caller with an error, unless it was answered already. "Moved" (the grain hands
    /// the call over to its next activation) is recorded as its own outcome, not as an error.
    /// </summary>
    public void Fail(PendingAllocation pending, Exception exception)
    {
        if (!pending.TryFinish())
        {
            return;
        }

        pending.CancellationRegistration.Dispose();
        Record(pending, exception is PoolGrainMovedException ? "moved" : "error", batchSize: 0, outcome: null, exception);
        pending.Completion.TrySetException(exception);
    }

    /// <summary>
    /// The caller stopped waiting (any thread). Queued or parked, nothing was written for it:
    /// "canceled". In the store, its batch may still commit for it, or fail with an unknown
    /// outcome (a connection lost after the commit) and report nothing, so it hears "outcome
    /// unknown" and retries with the same key, which finds what committed.
    /// </summary>
    /// <returns>False when it had been answered already.</returns>
    public bool GiveUp(PendingAllocation pending, CancellationToken token)
    {
        if (!pending.TryGiveUp())
        {
            return false;
        }

        if (pending.InStore)
        {
            var unknown = GrainErrors.OutcomeUnknown("its caller stopped waiting while its batch was in the store; a retry with the same key finds what committed");
            Record(pending, "canceled", batchSize: 0, outcome: null, unknown);
            pending.Completion.TrySetException(unknown);
        }
        else
        {
            Record(pending, "canceled", batchSize: 0, outcome: null, error: null);
            pending.Completion.TrySetCanceled(token);
        }

        return true;
    }

    /// <summary>Answers a release; false when its caller had stopped waiting.</summary>
    public bool Answer(PendingRelease pending, LeaseResult result, int batchSize)
    {
        pending.CancellationRegistration.Dispose();
        if (!pending.Completion.TrySetResult(result))
        {
            return false;
        }

        pending.Span?.SetTag(AllocatorTelemetry.Tags.BatchSize, batchSize);
        EndSpan(pending.Span, AllocatorTelemetry.Outcomes.Of(result.Status), error: null);
        return true;
    }

    public void Fail(PendingRelease pending, Exception exception)
    {
        pending.CancellationRegistration.Dispose();
        if (pending.Completion.TrySetException(exception))
        {
            EndSpan(pending.Span, "error", exception);
        }

        _ = pending.Completion.Task.Exception; // a release the grain made itself has no caller to observe it
    }

    /// <summary>A release whose caller stopped waiting: it leaves its queue (nothing was done) or, in a batch, may still commit.</summary>
    public void GiveUp(PendingRelease pending, CancellationToken token)
    {
        if (pending.Completion.TrySetCanceled(token))
        {
            EndSpan(pending.Span, "canceled", error: null);
        }
    }

    private void Record(PendingAllocation pending, string outcomeName, int batchSize, AllocationOutcome? outcome, Exception? error)
    {
        var tags = new TagList { PoolTag, { AllocatorTelemetry.Tags.Outcome, outcomeName } };
        GrainTelemetry.Outcomes.Add(1, tags);
        GrainTelemetry.AllocationDuration.Record(time.GetElapsedTime(pending.ArrivalTimestamp).TotalSeconds, tags);
        var queueWait = pending.BatchStarted == 0 ? 0d : time.GetElapsedTime(pending.ArrivalTimestamp, pending.BatchStarted).TotalSeconds;
        if (outcome is not null && pending.BatchStarted != 0)
        {
            GrainTelemetry.QueueWait.Record(queueWait, PoolTag);
        }

        if (pending.Span is not { } span)
        {
            return;
        }

        if (outcome is not null)
        {
            var decision = outcome.Decision;
            span.SetTag(AllocatorTelemetry.Tags.BatchSize, batchSize);
            span.SetTag(AllocatorTelemetry.Tags.QueueWait, queueWait);
            span.SetTag(AllocatorTelemetry.Tags.Retries, decision.Retries);
            span.SetTag(AllocatorTelemetry.Tags.BlockingFallback, decision.BlockingFallback);
            span.SetTag(AllocatorTelemetry.Tags.RowsSkipped, decision.RowsSkipped);
            if (outcome.Allocation is { } allocation)
            {
                span.SetTag(AllocatorTelemetry.Tags.Worker, allocation.WorkerId);
                span.SetTag(AllocatorTelemetry.Tags.Rank, decision.Rank);
                span.SetTag(AllocatorTelemetry.Tags.ExcessScore, decision.ExcessScore);
            }
        }

        TagStrategy(span);
        EndSpan(span, outcomeName, error);
    }

    private void TagStrategy(Activity span)
    {
        if (strategy() is { } known)
        {
            span.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(known));
        }
    }

    private static void EndSpan(Activity? span, string outcome, Exception? error)
    {
        if (span is null)
        {
            return;
        }

        span.SetTag(AllocatorTelemetry.Tags.Outcome, outcome);
        if (error is not null)
        {
            span.SetStatus(ActivityStatusCode.Error, error.Message);
        }

        span.Dispose();
    }
}
