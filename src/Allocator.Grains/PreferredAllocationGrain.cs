using System.Diagnostics;
using Allocator.Telemetry;
using Microsoft.Extensions.Logging;
using Orleans.Placement;

namespace Allocator.Grains;

/// <summary>
/// One session key's allocation across an ordered list of pools (ADR 0036). Not reentrant, so a
/// retry sent while an attempt still runs waits for it (two attempts never race across pools).
/// Placed on the silo of the first caller: the pools' grains do the work, this one only decides
/// where to ask.
/// </summary>
/// <remarks>
/// <list type="number">
/// <item>A new activation first asks every listed pool's store what the key holds there
/// (<see cref="IWorkerStore.GetAllocationByKeyAsync"/>): the pools' own idempotency is the durable
/// record, so an attempt whose answer was lost before this activation existed is found wherever it
/// allocated, also on another database, before anything is allocated anywhere.</item>
/// <item>Then each pool in order, without waiting: the first with room answers.</item>
/// <item>When all are full and the caller may wait, the request waits in every pool's queue at
/// once, each pool asking this grain for the claim before it sends the request to its store
/// (<see cref="ClaimBook"/>): the first pool to free a slot serves it, and no other can.</item>
/// </list>
/// An outcome that may have committed somewhere unseen (a silo that left mid-call) makes the next
/// attempt ask the stores again.
/// </remarks>
[PreferLocalPlacement]
[GrainType("allocator-preferred-allocation")]
[CollectionAgeLimit(Minutes = 2)]
internal sealed partial class PreferredAllocationGrain(
    IGrainFactory grains,
    PoolGrainCaller poolGrains,
    IWorkerStore store,
    TimeProvider time,
    ILogger<PreferredAllocationGrain> logger) : Grain, IPreferredAllocationGrain
{
    /// <summary>The most pools one request may name.</summary>
    public const int MaxPools = 8;

    private readonly ClaimBook _claims = new();
    private Allocation? _made;
    private bool _storesAsked;

    public async Task<AllocationOutcome> AllocateAsync(AllocationRequest request, string[] pools, TimeSpan maxWait, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(request);
        if (CheckPools(pools) is { } error)
        {
            throw new ArgumentException(error, nameof(pools));
        }

        var started = time.GetTimestamp();
        using var span = AllocatorTelemetry.ActivitySource.StartActivity("allocator.preferred_allocate");
        span?.SetTag("allocator.pools", string.Join(',', pools));
        try
        {
            var outcome = await AllocateCoreAsync(request, pools, maxWait, started, span, cancellationToken);
            span?.SetTag(AllocatorTelemetry.Tags.Outcome, AllocatorTelemetry.Outcomes.Of(outcome.Status));
            span?.SetTag(AllocatorTelemetry.Tags.Pool, outcome.Allocation?.PoolId);
            if (outcome.Status == AllocationStatus.Unavailable && outcome.OutcomeUnknown)
            {
                _storesAsked = false;
            }

            return outcome;
        }
        catch (Exception ex)
        {
            // Whatever it was, an allocation may exist that this activation has not seen: ask again.
            _storesAsked = false;
            span?.SetStatus(ActivityStatusCode.Error, ex.GetType().Name);
            throw;
        }
    }

    public Task<long> ClaimAsync(string pool, Guid attempt) => _claims.Ask(attempt);

    public Task GiveBackClaimAsync(string pool, Guid attempt, long lease)
    {
        _claims.GiveBack(attempt, lease);
        return Task.CompletedTask;
    }

    /// <summary>Null when the list is one to <see cref="MaxPools"/> pool ids, none twice; else why not.</summary>
    public static string? CheckPools(IReadOnlyList<string>? pools)
    {
        if (pools is null || pools.Count == 0)
        {
            return "pools must name at least one pool.";
        }

        if (pools.Count > MaxPools)
        {
            return $"pools may name at most {MaxPools} pools; it names {pools.Count}.";
        }

        for (var i = 0; i < pools.Count; i++)
        {
            if (AllocatorValidation.CheckId(pools[i], $"pools[{i}]") is { } invalid)
            {
                return invalid;
            }

            for (var j = 0; j < i; j++)
            {
                if (string.Equals(pools[i], pools[j], StringComparison.Ordinal))
                {
                    return $"pools names '{pools[i]}' twice (pools[{j}] and pools[{i}]); name each pool once.";
                }
            }
        }

        return null;
    }

    private async Task<AllocationOutcome> AllocateCoreAsync(AllocationRequest request, string[] pools, TimeSpan maxWait, long started, Activity? span, CancellationToken cancellationToken)
    {
        if (_made is null && !_storesAsked)
        {
            _made = await FindEarlierAsync(request, pools, cancellationToken);
            _storesAsked = true;
        }

        if (_made is { } made)
        {
            // The key's allocation is in that pool: its grain answers it (existing), as a retry
            // of a one-pool request is answered.
            span?.AddEvent(new ActivityEvent("existing", tags: new ActivityTagsCollection { [AllocatorTelemetry.Tags.Pool] = made.PoolId }));
            return await poolGrains.AllocateAsync(made.PoolId, request, TimeSpan.Zero, cancellationToken);
        }

        // Each pool in order, without waiting: one batched grain call each.
        Exception? failure = null;
        AllocationOutcome? unavailable = null;
        foreach (var pool in pools)
        {
            AllocationOutcome outcome;
            try
            {
                outcome = await poolGrains.AllocateAsync(pool, request, TimeSpan.Zero, cancellationToken);
            }
            catch (AllocatorException ex) when (ex is { Kind: AllocatorErrorKind.Unavailable, OutcomeUnknown: false })
            {
                failure = ex; // nothing written there: the next pool may serve
                continue;
            }

            span?.AddEvent(new ActivityEvent("tried", tags: new ActivityTagsCollection
            {
                [AllocatorTelemetry.Tags.Pool] = pool,
                [AllocatorTelemetry.Tags.Outcome] = AllocatorTelemetry.Outcomes.Of(outcome.Status),
            }));
            switch (outcome.Status)
            {
                case AllocationStatus.Allocated or AllocationStatus.Existing:
                    _made = outcome.Allocation;
                    return outcome;
                case AllocationStatus.Unavailable when outcome.OutcomeUnknown:
                    return outcome; // the retry asks the stores, and finds it if it committed
                case AllocationStatus.Unavailable:
                    unavailable = outcome;
                    continue;
            }
        }

        var wait = maxWait - time.GetElapsedTime(started);
        if (failure is null && unavailable is null && wait > TimeSpan.Zero)
        {
            return await WaitInEveryPoolAsync(request, pools, wait, span, cancellationToken);
        }

        // A pool that could not answer might have had room: "retry", not "no capacity".
        return failure is not null ? throw failure : unavailable ?? AllocationOutcome.NoCapacity();
    }

    /// <summary>What the key holds in any of the pools (the first in order that holds it), read from their stores at once.</summary>
    private async Task<Allocation?> FindEarlierAsync(AllocationRequest request, string[] pools, CancellationToken cancellationToken)
    {
        if (pools.Length == 1)
        {
            return null; // one pool: its own allocate answers the key (existing), no read needed
        }

        var reads = pools.Select(pool => store.GetAllocationByKeyAsync(pool, request.SessionKey, request.Owner, cancellationToken)).ToArray();
        try
        {
            await Task.WhenAll(reads);
        }
        catch (Exception) when (reads.Any(r => r.IsFaulted))
        {
            var failed = reads.First(r => r.IsFaulted).Exception!.InnerException!;
            if (failed is AllocatorException { Kind: AllocatorErrorKind.NotFound })
            {
                throw failed; // a pool deleted since the request was checked
            }

            LogLookupFailed(logger, failed, request.SessionKey);
            throw new AllocatorException(
                AllocatorErrorKind.Unavailable,
                "Could not read what the key holds in every pool it names; nothing was allocated. Retry with the same idempotency key.",
                outcomeUnknown: false,
                failed);
        }

        return reads.Select(r => r.Result).FirstOrDefault(a => a is not null);
    }

    /// <summary>
    /// Every pool is full: the request waits in each one's queue, and the first pool to free a
    /// slot (holding the claim) serves it. Known-nothing endings drop a pool from the race; an
    /// ending that may have committed, from the pool holding the claim, ends the attempt with
    /// "outcome unknown" (no other pool may allocate then).
    /// </summary>
    private async Task<AllocationOutcome> WaitInEveryPoolAsync(AllocationRequest request, string[] pools, TimeSpan wait, Activity? span, CancellationToken cancellationToken)
    {
        _claims.Begin();
        var started = time.GetTimestamp();
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        var self = this.AsReference<IPreferredAllocationGrain>();
        var calls = new Dictionary<Task<AllocationOutcome>, (string Pool, Guid Ticket)>();
        var resent = new Dictionary<string, int>(StringComparer.Ordinal);
        void Send(string pool, TimeSpan forWait)
        {
            // Each call its own ticket: one given up on can never be granted the claim (ClaimBook).
            var ticket = _claims.Issue();
            calls[grains.GetGrain<IPoolClaimsGrain>(pool).AllocateClaimedAsync(request, forWait, self, ticket, stop.Token)] = (pool, ticket);
        }

        foreach (var pool in pools)
        {
            Send(pool, wait);
        }

        span?.AddEvent(new ActivityEvent("waiting", tags: new ActivityTagsCollection { ["allocator.pools_waited"] = pools.Length }));
        Exception? failure = null;
        AllocationOutcome? unavailable = null;
        try
        {
            while (calls.Count > 0)
            {
                var done = await Task.WhenAny(calls.Keys);
                var (pool, ticket) = calls[done];
                calls.Remove(done);
                var held = _claims.Holds(ticket);
                if (done.IsCompletedSuccessfully)
                {
                    var outcome = done.Result;
                    if (outcome.Status is AllocationStatus.Allocated or AllocationStatus.Existing)
                    {
                        _made = outcome.Allocation;
                        return outcome;
                    }

                    if (outcome is { Status: AllocationStatus.Unavailable, OutcomeUnknown: true } && held)
                    {
                        return outcome;
                    }

                    unavailable = outcome.Status == AllocationStatus.Unavailable ? outcome : unavailable;
                    _claims.Drop(ticket);
                    continue;
                }

                var ex = done.Exception?.InnerException ?? new OperationCanceledException(cancellationToken);
                if (held && !NothingDone(ex))
                {
                    LogClaimHolderUnknown(logger, ex, request.SessionKey, pool);
                    throw GrainErrors.OutcomeUnknown($"pool '{pool}' was allocating for the request when its call failed");
                }

                // Not allocating now, and never again under this ticket, even if the call lives on
                // somewhere (forwarded by a silo that left).
                _claims.Drop(ticket);
                var left = wait - time.GetElapsedTime(started);
                if (ex is not OperationCanceledException && left > TimeSpan.Zero && !stop.IsCancellationRequested
                    && CallResends.Classify(ex) != AttemptFailure.Final
                    && (resent[pool] = resent.GetValueOrDefault(pool) + 1) <= MaxResends)
                {
                    // The pool's grain moved (its instance stops) or its silo left: the request
                    // waits again where the grain is now, for what is left of its wait.
                    LogResent(logger, request.SessionKey, pool, resent[pool], ex.GetType().Name);
                    await Task.Delay(CallResends.Pause(resent[pool]), time, CancellationToken.None);
                    Send(pool, left);
                    continue;
                }

                failure = ex is OperationCanceledException ? failure : ex;
            }
        }
        finally
        {
            _claims.End();
            stop.Cancel();
            foreach (var left in calls.Keys)
            {
                _ = left.ContinueWith(static t => _ = t.Exception, TaskScheduler.Default); // observed: their callers are gone
            }
        }

        cancellationToken.ThrowIfCancellationRequested();
        return failure switch
        {
            null => unavailable ?? AllocationOutcome.NoCapacity(),
            AllocatorException => throw failure,

            // Not the call holding the claim, and its ticket dropped: nothing was or will be allocated under it.
            _ => throw new AllocatorException(
                AllocatorErrorKind.Unavailable,
                "A pool could not be asked for this request while it waited (its grain was moving or its instance left); nothing was allocated. Retry with the same idempotency key and pools.",
                outcomeUnknown: false,
                failure),
        };
    }

    /// <summary>Most times one pool's waiting call is sent again after its grain moved (paused as <see cref="PoolGrainCaller"/> pauses).</summary>
    private const int MaxResends = 20;

    [LoggerMessage(Level = LogLevel.Information, Message = "Key {SessionKey}: the waiting call to pool {Pool} is sent again (time {Resend}) after {Failure}: its grain moved or could not be reached.")]
    private static partial void LogResent(ILogger logger, string sessionKey, string pool, int resend, string failure);

    /// <summary>A pool call's failure that says nothing was written for the request there.</summary>
    private static bool NothingDone(Exception failure) => failure switch
    {
        OperationCanceledException => true, // the grain answers a cancellation only with nothing held
        AllocatorException { OutcomeUnknown: var unknown } => !unknown,
        ArgumentException => true,
        _ => CallResends.Classify(failure) == AttemptFailure.NothingDone,
    };

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not read what key {SessionKey} holds in the pools it names; nothing was allocated.")]
    private static partial void LogLookupFailed(ILogger logger, Exception exception, string sessionKey);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Key {SessionKey}: pool {Pool} held the claim when its call failed; answering \"outcome unknown\", and no other pool allocates for this attempt.")]
    private static partial void LogClaimHolderUnknown(ILogger logger, Exception exception, string sessionKey, string pool);
}
