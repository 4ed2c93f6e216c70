using System.Runtime.ExceptionServices;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Allocator.Grains;

/// <summary>
/// Calls pool grains the way every caller in the silo should: a call the grain answered "moved"
/// (its silo is stopping and hands it over), or that could not reach it (its silo is gone and
/// membership has not said so yet), or (an allocation) whose answer was lost with a silo that
/// left, is sent again to wherever the grain is now, within the call's own deadline. So a
/// graceful stop or a killed instance shows to callers as a slower answer, not as an error.
/// The rules are in <see cref="CallResends"/>.
/// </summary>
/// <summary>
/// How long an allocation may go on being settled past its own deadline when an attempt's answer
/// was lost with a silo that left (<see cref="PoolGrainCaller.AllocateAsync"/>): until
/// <see cref="Within"/> from the call's start (the HTTP request's own limit leaves that much),
/// unless <see cref="Cancellation"/> fires (the caller left, the instance stops).
/// </summary>
internal readonly record struct Settling(TimeSpan Within, CancellationToken Cancellation);

internal sealed partial class PoolGrainCaller(IGrainFactory grains, IWorkerStore store, TimeProvider time, IOptions<GrainOptions> options, ILogger<PoolGrainCaller> logger)
{
    private readonly TimeSpan _callTimeout = options.Value.CallTimeout;

    /// <summary>
    /// <see cref="IPoolGrain.AllocateAsync"/>, sent again as long as the request's wait plus the
    /// grain call timeout allow, each time with what remains of its wait. Sending it again is
    /// safe because of its session key: a repeat returns what an earlier attempt committed. After
    /// an attempt whose outcome is unknown, a repeat that allocates nothing is answered "outcome
    /// unknown", as a release's is, unless <paramref name="settling"/> leaves time to settle the
    /// key (<see cref="SettleAsync"/>).
    /// </summary>
    public async Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default, Settling? settling = null)
    {
        var grain = grains.GetPoolGrain(poolId);
        var resends = new CallResends(maxWait + _callTimeout, time);
        while (true)
        {
            try
            {
                var outcome = await grain.AllocateAsync(request, resends.RemainingWait(maxWait), cancellationToken);

                // After an attempt whose outcome is unknown, only an allocation settles the key: that
                // attempt may still be running where the grain lives now and commit after this answer
                // of "no capacity" or "nothing written" (issue 39, #2). The caller retries the key,
                // unless there is time to settle it here.
                if (resends.OutcomeUnknown && outcome.Status is AllocationStatus.NoCapacity or AllocationStatus.Unavailable)
                {
                    return outcome.Status == AllocationStatus.NoCapacity && settling is { } s
                        && await SettleAsync(grain, request, maxWait, resends, s) is { } settled
                        ? settled
                        : throw CallResends.Unknown();
                }

                return outcome;
            }
            catch (Exception ex) when (ex is not OperationCanceledException)
            {
                await PauseOrThrowAsync(resends, ex, cancellationToken);
            }
            catch (OperationCanceledException) when (resends.OutcomeUnknown)
            {
                // This attempt was canceled with nothing written, but an earlier one may have committed.
                throw resends.GiveUp(new OperationCanceledException(cancellationToken));
            }
        }
    }

    /// <summary>
    /// An allocation was answered "no capacity" after an attempt whose answer was lost with a
    /// silo that left. That attempt may still be waiting where the grain lives now (a call the
    /// stopping silo forwarded there, parked among the waiters; seen in the rolling upgrade,
    /// issue 46) and be allocated after this answer. It is never served once the wait it was
    /// sent with has ended (<see cref="Admission.WaitEnded"/>), and it was sent before its silo
    /// left: so by the wait after this call heard of the departure (plus <see cref="SettleMargin"/>)
    /// it can join no batch any more. What it (or a killed silo's statement) has in the store the
    /// database orders before a later attempt on the key's unique index. One more attempt without
    /// a wait then answers for the key: its allocation (existing), a slot freed since, or "no
    /// capacity" with nothing held for it. Null when there is no time left for that, or it fails:
    /// the caller is answered "outcome unknown".
    /// </summary>
    private async Task<AllocationOutcome?> SettleAsync(IPoolGrain grain, AllocationRequest request, TimeSpan maxWait, CallResends resends, Settling settling)
    {
        var over = resends.LastUnknownAt.GetValueOrDefault() + maxWait + SettleMargin;
        if (over + SettleMargin > settling.Within)
        {
            return null;
        }

        try
        {
            if (over > resends.Elapsed)
            {
                await Task.Delay(over - resends.Elapsed, time, settling.Cancellation);
            }

            using var limit = CancellationTokenSource.CreateLinkedTokenSource(settling.Cancellation);
            limit.CancelAfter(settling.Within - resends.Elapsed);
            var final = await grain.AllocateAsync(request, TimeSpan.Zero, limit.Token);
            LogSettled(logger, request.SessionKey, final.Status, resends.Elapsed.TotalSeconds);
            return final.Status is AllocationStatus.Allocated or AllocationStatus.Existing or AllocationStatus.NoCapacity ? final : null;
        }
        catch (Exception ex)
        {
            LogSettleFailed(logger, ex, request.SessionKey);
            return null;
        }
    }

    /// <summary>Time for a lost attempt's last moment in the grain to pass (a message under load), and what the final attempt is left at least.</summary>
    internal static TimeSpan SettleMargin { get; } = TimeSpan.FromSeconds(1);

    [LoggerMessage(Level = LogLevel.Information, Message = "Allocation of key {SessionKey} settled after an attempt whose answer was lost with its silo: {Status} after {Seconds:0.0} s.")]
    private static partial void LogSettled(ILogger logger, string sessionKey, AllocationStatus status, double seconds);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Allocation of key {SessionKey} could not be settled after an attempt whose answer was lost with its silo; answering \"outcome unknown\".")]
    private static partial void LogSettleFailed(ILogger logger, Exception exception, string sessionKey);

    /// <summary>
    /// <see cref="IPoolGrain.ReleaseAsync"/>, sent again within the grain call timeout. After an
    /// attempt whose outcome is unknown, a repeat that finds the allocation ended asks the store
    /// how it ended (<see cref="SettleAsync"/>): the first attempt may have been what ended it.
    /// <paramref name="owner"/> as in <see cref="IPoolGrain.ReleaseAsync"/> (issue 22: only that
    /// tenant's allocation).
    /// </summary>
    public async Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, string? owner = null, CancellationToken cancellationToken = default)
    {
        var grain = grains.GetPoolGrain(poolId);
        var resends = new CallResends(_callTimeout, time);
        while (true)
        {
            try
            {
                var result = await grain.ReleaseAsync(allocationId, epoch, owner, cancellationToken);
                return resends.OutcomeUnknown && result.Status == LeaseStatus.NotActive
                    ? await SettleAsync(poolId, allocationId, epoch, result, cancellationToken)
                    : result;
            }
            catch (Exception ex) when (ex is not OperationCanceledException)
            {
                await PauseOrThrowAsync(resends, ex, cancellationToken);
            }
            catch (OperationCanceledException) when (resends.OutcomeUnknown)
            {
                throw resends.GiveUp(new OperationCanceledException(cancellationToken));
            }
        }
    }

    /// <summary>
    /// A release was sent again after an attempt whose answer was lost (in a rolling restart: a
    /// call the stopping silo forwarded to the grain's next activation, whose caller heard that
    /// silo leave before the forward was answered), and the repeat found the allocation ended.
    /// How it ended decides: by a release at this epoch, which only its holder presents, is this
    /// release's outcome (OK, as the lost answer was); by its lease or its worker's deregistration
    /// is not a release's, so the repeat's "not active" stands. Anything else, or a store that
    /// cannot be read, stays "outcome unknown".
    /// </summary>
    private async Task<LeaseResult> SettleAsync(string poolId, Guid allocationId, long epoch, LeaseResult repeat, CancellationToken cancellationToken)
    {
        Allocation? ended;
        try
        {
            ended = await store.GetAllocationAsync(poolId, allocationId, cancellationToken).WaitAsync(_callTimeout, time, cancellationToken);
        }
        catch (Exception ex) when (ex is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            LogSettleFailed(logger, ex, allocationId, poolId);
            throw CallResends.Unknown();
        }

        return ended switch
        {
            { EndReason: AllocationEndReason.Released } when ended.Epoch == epoch => new LeaseResult(LeaseStatus.Ok, ended),
            { EndReason: AllocationEndReason.Released } or { EndReason: AllocationEndReason.Expired or AllocationEndReason.WorkerDeregistered } => repeat,
            _ => throw CallResends.Unknown(),
        };
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not read allocation {AllocationId} of pool {Pool} to tell whether a release whose answer was lost ended it; answering \"outcome unknown\".")]
    private static partial void LogSettleFailed(ILogger logger, Exception exception, Guid allocationId, string pool);

    /// <summary>
    /// <see cref="IPoolGrain.AbandonAsync"/>, once, within the grain call timeout. Its caller is
    /// gone, so nothing is thrown: a grain that cannot be reached leaves the allocation to its
    /// lease, and that is logged.
    /// </summary>
    public async Task<bool> AbandonAsync(string poolId, AllocationRequest request, Allocation allocation)
    {
        try
        {
            return await grains.GetPoolGrain(poolId).AbandonAsync(request, allocation).WaitAsync(_callTimeout, time);
        }
        catch (Exception ex)
        {
            LogAbandonFailed(logger, ex, allocation.AllocationId, poolId);
            return false;
        }
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not hand allocation {AllocationId} of pool {Pool} back to its grain after its caller left; only its lease frees it now.")]
    private static partial void LogAbandonFailed(ILogger logger, Exception exception, Guid allocationId, string pool);

    private async Task PauseOrThrowAsync(CallResends resends, Exception failure, CancellationToken cancellationToken)
    {
        if (resends.After(failure) is not { } pause)
        {
            throw Answer(resends.GiveUp(failure), failure);
        }

        if (pause > TimeSpan.Zero)
        {
            try
            {
                await Task.Delay(pause, time, cancellationToken);
            }
            catch (OperationCanceledException)
            {
                throw Answer(resends.GiveUp(failure), failure);
            }
        }
    }

    /// <summary>The answer to throw; the failure itself is rethrown with the stack it was thrown with.</summary>
    private static Exception Answer(Exception answer, Exception failure)
    {
        if (ReferenceEquals(answer, failure))
        {
            ExceptionDispatchInfo.Throw(failure);
        }

        return answer;
    }
}
