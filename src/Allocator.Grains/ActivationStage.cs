namespace Allocator.Grains;

/// <summary>
/// Whether a pool grain's activation still takes calls, as each of its parts must know. Only
/// <see cref="ActivationHandOver"/> changes it; the others read it. Single-threaded by contract:
/// the grain's turns only.
/// </summary>
internal sealed class ActivationStage
{
    /// <summary>New calls are refused; queued and parked callers have been answered.</summary>
    public bool Stopping { get; private set; }

    /// <summary>Stopping to move to another silo: callers hear "moved" (and send the call again), not "unavailable".</summary>
    public bool HandingOver { get; private set; }

    /// <summary>
    /// Orleans stopped waiting for this activation to deactivate: the grain's next activation may
    /// already answer calls, so nothing taken for abandoned here is released any more (issue 39, #4).
    /// </summary>
    public bool GivenUpByOrleans { get; private set; }

    /// <summary>What a caller hears once the grain is stopping: "moved" or "unavailable", nothing was done.</summary>
    public Exception StopAnswer() => GrainErrors.Stopping(HandingOver);

    /// <summary>Stops taking calls; false when stopping already (the first stop decides "moved" or not).</summary>
    public bool Stop(bool handingOver)
    {
        if (Stopping)
        {
            return false;
        }

        Stopping = true;
        HandingOver = handingOver;
        return true;
    }

    public void OrleansGaveUp() => GivenUpByOrleans = true;
}
