namespace Allocator.Grains;

/// <summary>What one failed attempt to call a pool grain tells its caller.</summary>
internal enum AttemptFailure
{
    /// <summary>An answer to pass on (a store error, a bad request, a cancellation).</summary>
    Final,

    /// <summary>Nothing was done: the grain was moving, or the call never reached a grain.</summary>
    NothingDone,

    /// <summary>The call may have been carried out: the silo hosting the grain left the cluster before its answer arrived.</summary>
    OutcomeUnknown,
}

/// <summary>
/// The rules by which <see cref="PoolGrainCaller"/> sends a call to a pool grain again, for one
/// call: which failures are sent again, how long to pause, and what to answer when it stops.
/// </summary>
/// <remarks>
/// A call is sent again while the grain is moving (a graceful stop hands it over) or could not be
/// reached (its silo is gone and membership has not said so yet), until the call's budget runs
/// out. An allocation is also sent again when the silo hosting the grain left before its answer
/// arrived: its session key makes the repeat return what the first attempt committed, never a
/// second allocation. A release is sent again then too, but a repeat that finds the allocation
/// already ended cannot tell whether the first attempt ended it: its outcome stays unknown.
/// </remarks>
/// <param name="budget">How long, from the first attempt, the call may keep being sent.</param>
internal sealed class CallResends(TimeSpan budget, TimeProvider time)
{
    private readonly long _started = time.GetTimestamp();

    /// <summary>Attempts that failed so far.</summary>
    public int Failures { get; private set; }

    /// <summary>Some attempt may have been carried out (see <see cref="AttemptFailure.OutcomeUnknown"/>).</summary>
    public bool OutcomeUnknown { get; private set; }

    /// <summary>When (from the first attempt) the last attempt whose outcome is unknown failed; null: none.</summary>
    public TimeSpan? LastUnknownAt { get; private set; }

    public TimeSpan Elapsed => time.GetElapsedTime(_started);

    public static AttemptFailure Classify(Exception exception) => exception switch
    {
        PoolGrainMovedException => AttemptFailure.NothingDone,

        // Orleans breaks the calls outstanding to a silo declared dead (a rejection for a
        // target known to be dead says the same, and is taken the same way): the call may have
        // run. Before its base class, which it derives from.
        SiloUnavailableException => AttemptFailure.OutcomeUnknown,

        // Rejected by the messaging layer before any grain ran it: no silo to deliver to, an
        // activation that could not be created on a stopping silo, a connection refused.
        OrleansMessageRejectionException => AttemptFailure.NothingDone,
        _ => AttemptFailure.Final,
    };

    /// <summary>The pause before sending the call again after <paramref name="failure"/>, or null: answer it.</summary>
    public TimeSpan? After(Exception failure)
    {
        var kind = Classify(failure);
        if (kind == AttemptFailure.Final)
        {
            return null;
        }

        Failures++;
        if (kind == AttemptFailure.OutcomeUnknown)
        {
            OutcomeUnknown = true;
            LastUnknownAt = Elapsed;
        }

        var pause = Pause(Failures);
        return Elapsed + pause < budget ? pause : null;
    }

    /// <summary>
    /// At once after the first failure (a moved grain is found again through Orleans' directory),
    /// then growing to 200 ms while a dead silo's grain cannot be reached.
    /// </summary>
    internal static TimeSpan Pause(int failures) => failures switch
    {
        <= 1 => TimeSpan.Zero,
        2 => TimeSpan.FromMilliseconds(25),
        3 => TimeSpan.FromMilliseconds(50),
        4 => TimeSpan.FromMilliseconds(100),
        _ => TimeSpan.FromMilliseconds(200),
    };

    /// <summary>What remains of the caller's wait for capacity, measured from the first attempt.</summary>
    public TimeSpan RemainingWait(TimeSpan maxWait) => maxWait > Elapsed ? maxWait - Elapsed : TimeSpan.Zero;

    /// <summary>
    /// The answer when the call is not sent again: the last failure as it is, unless an earlier
    /// attempt may have been carried out (then "outcome unknown", never "nothing was done").
    /// </summary>
    public Exception GiveUp(Exception last) => Classify(last) switch
    {
        _ when OutcomeUnknown => Unknown(),
        AttemptFailure.NothingDone => GrainErrors.StillMoving(Elapsed),
        _ => last,
    };

    /// <summary>"Outcome unknown: retry with the same key", for a call some attempt of which may have been carried out.</summary>
    public static AllocatorException Unknown() =>
        GrainErrors.OutcomeUnknown("the silo hosting the pool's grain left the cluster before the answer arrived");
}
