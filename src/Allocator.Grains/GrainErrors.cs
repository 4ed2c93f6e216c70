namespace Allocator.Grains;

/// <summary>The errors the grains answer with themselves (the store's errors pass through as they are).</summary>
internal static class GrainErrors
{
    public static AllocatorException Stopping() =>
        new(AllocatorErrorKind.Unavailable, "The allocator is stopping; nothing was done. Retry, on another instance if there is one.");

    /// <summary>The grain's silo is stopping and no other silo is there to take the grain (see <see cref="Moved"/> when one is).</summary>
    public static Exception Stopping(bool handingOver) => handingOver ? Moved() : Stopping();

    /// <summary>The grain is moving to another silo: nothing was done, the caller sends the call again.</summary>
    public static PoolGrainMovedException Moved() => new();

    /// <summary>
    /// The store refused this activation's batch: a later activation of the pool has claimed it
    /// (issue 47, its instance hung and another took the pool over). Nothing was done; the caller
    /// sends the call again, to the pool's current activation.
    /// </summary>
    public static PoolGrainMovedException Superseded() =>
        new("A later activation of the pool's grain has taken the pool over (this one's instance was unresponsive); nothing was done for this call. Send it again.");

    /// <summary>A call that kept finding the pool's grain on the move until its deadline.</summary>
    public static AllocatorException StillMoving(TimeSpan waited) =>
        new(AllocatorErrorKind.Unavailable, $"The pool's grain was moving between instances for {waited.TotalSeconds:0.###} s, longer than this call may wait; nothing was done. Retry with the same idempotency key.");

    /// <param name="nothingWritten">True when the request never reached the store: the caller may retry freely.</param>
    public static AllocatorException CallTimedOut(TimeSpan timeout, bool nothingWritten) =>
        new(
            AllocatorErrorKind.Unavailable,
            nothingWritten
                ? $"The request waited {timeout} in the pool grain without reaching the store; nothing was written. Retry with the same idempotency key."
                : $"The grain did not answer within {timeout}. The outcome is unknown: retry with the same idempotency key.",
            outcomeUnknown: !nothingWritten,
            new TimeoutException());

    /// <summary>Flagged <see cref="AllocatorException.OutcomeUnknown"/>, so the host answers 503 <c>outcome-unknown</c>, not "nothing was written".</summary>
    public static AllocatorException OutcomeUnknown(string why) =>
        new(AllocatorErrorKind.Unavailable, $"The outcome is unknown ({why}): retry with the same idempotency key.", outcomeUnknown: true, innerException: null);
}
