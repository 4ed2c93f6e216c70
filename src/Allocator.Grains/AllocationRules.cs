namespace Allocator.Grains;

/// <summary>What a pool grain does with a caller's request when it is taken for a batch.</summary>
internal enum Admission
{
    /// <summary>Into the batch.</summary>
    Go,

    /// <summary>Its caller gave up while it was queued, and was answered: nothing to do.</summary>
    GaveUp,

    /// <summary>Its caller stopped waiting (its call deadline passed): answer "nothing was written", start nothing.</summary>
    PastCallDeadline,

    /// <summary>
    /// A waiter woken after its wait ended (the deadline timer had not answered it yet): answered
    /// as its wait's end answers it ("no capacity"), never served late.
    /// </summary>
    WaitEnded,
}

/// <summary>What a pool grain does with a caller once its batch has decided its request.</summary>
internal enum Settlement
{
    /// <summary>Answered already, as soon as its own statement committed.</summary>
    AlreadySettled,

    /// <summary>Its caller gave up while the batch was in the store: nobody will hear the outcome.</summary>
    CallerGone,

    /// <summary>No capacity, and it may wait: park it in memory.</summary>
    Park,

    /// <summary>Answer it with the outcome.</summary>
    Answer,
}

/// <summary>
/// The rules a pool grain applies to one allocation request, from arrival to answer, as plain
/// functions of the request and the clock: the grain holds the state, these decide.
/// </summary>
internal static class AllocationRules
{
    /// <summary>
    /// The key under which requests claim one another's allocations (<see cref="AbandonedKeys"/>):
    /// a session key is its owner's (issue 22), so another owner's request with the same key is
    /// another key. A unit separator parts them: session keys hold no control characters.
    /// </summary>
    public static string ClaimKey(AllocationRequest request) =>
        request.Owner is null ? request.SessionKey : string.Concat(request.Owner, "\u001F", request.SessionKey);

    /// <summary>The wait a caller gets: what it asked for, bounded by <see cref="AllocatorLimits.MaxWait"/>.</summary>
    public static TimeSpan BoundedWait(TimeSpan maxWait) => maxWait > AllocatorLimits.MaxWait ? AllocatorLimits.MaxWait : maxWait;

    /// <summary>
    /// When the caller stops waiting for the grain: its wait plus the grain call timeout from its
    /// arrival. A request still queued then goes to no batch.
    /// </summary>
    public static DateTimeOffset CallDeadline(DateTimeOffset arrivedAt, TimeSpan wait, TimeSpan callTimeout) => arrivedAt + wait + callTimeout;

    /// <summary>
    /// Decides whether a request taken for a batch goes to the store. Marks it in the store first
    /// (<see cref="PendingAllocation.EnterStore"/>): a cancellation that claims the caller after
    /// that sees it and answers "outcome unknown"; one that claimed it before is seen here.
    /// </summary>
    public static Admission Admit(PendingAllocation pending, DateTimeOffset now)
    {
        pending.EnterStore();
        if (pending.IsDone)
        {
            pending.LeaveStore();
            return Admission.GaveUp;
        }

        if (now >= pending.CallDeadline)
        {
            // Its caller has stopped waiting even if no cancellation reached us (a silo that
            // died): never start a statement nobody will hear the answer of.
            pending.LeaveStore();
            return Admission.PastCallDeadline;
        }

        if (pending.LastOutcome is not null && pending.WaitDeadline <= now)
        {
            // A caller may hold its key's outcome settled once the wait it gave has ended
            // (PoolGrainCaller settles an attempt whose answer a departed silo lost by that).
            pending.LeaveStore();
            return Admission.WaitEnded;
        }

        return Admission.Go;
    }

    /// <summary>
    /// The request as the store gets it: the caller's deadline travels with it (the store starts
    /// no retry or fallback statement past it), and it has a lease whatever the pool's settings:
    /// its own, else the pool's default, else <paramref name="fallbackLease"/>. The store chooses
    /// between the last two with the pool's settings as they are when it allocates: the grain's
    /// view of them may be unknown or stale (issue 20: 262 of 40,443 allocations got the 24-hour
    /// fallback in a pool whose default was 60 s while its settings were being changed).
    /// </summary>
    /// <param name="fallbackLease">The lease of a request that names none, in a pool without a default lease.</param>
    public static AllocationRequest ForStore(PendingAllocation pending, TimeSpan fallbackLease)
    {
        var request = pending.Request;
        if (request.Deadline is not { } own || own > pending.CallDeadline)
        {
            request = request with { Deadline = pending.CallDeadline };
        }

        // No allocation without a lease from a call that can time out (ADR 0016).
        if (request.Lease is null && request.FallbackLease is null)
        {
            request = request with { FallbackLease = fallbackLease };
        }

        return request;
    }

    /// <summary>
    /// Whether a caller that found no capacity may wait (in memory) for some: it asked to wait,
    /// and its wait, bounded by the pool's maximum wait from its arrival, has not passed. Fixes
    /// <see cref="PendingAllocation.WaitDeadline"/> the first time the pool's bound is known.
    /// </summary>
    public static bool MayWait(PendingAllocation pending, PoolSettings? settings, DateTimeOffset now)
    {
        if (pending.MaxWait <= TimeSpan.Zero)
        {
            return false;
        }

        if (pending.WaitDeadline is null)
        {
            if (settings is null)
            {
                return false; // the pool's bound is unknown (settings could not be read): do not wait
            }

            var wait = pending.MaxWait < settings.MaxWait ? pending.MaxWait : settings.MaxWait;
            pending.WaitDeadline = pending.ArrivedAt + wait;
        }

        return pending.WaitDeadline > now;
    }

    /// <summary>What becomes of a caller once its batch decided its request.</summary>
    /// <param name="mayWait">Asked only for a caller that found no capacity and is still waiting.</param>
    public static Settlement Settle(PendingAllocation pending, AllocationOutcome outcome, Func<bool> mayWait)
    {
        if (pending.Settled)
        {
            return Settlement.AlreadySettled;
        }

        if (pending.GaveUp)
        {
            return Settlement.CallerGone;
        }

        return outcome.Status == AllocationStatus.NoCapacity && !pending.IsDone && mayWait()
            ? Settlement.Park
            : Settlement.Answer;
    }
}
