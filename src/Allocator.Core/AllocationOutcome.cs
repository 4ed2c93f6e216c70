namespace Allocator;

/// <summary>The answer to one request of a batch.</summary>
public sealed record AllocationOutcome(AllocationStatus Status, Allocation? Allocation, AllocationDecision Decision)
{
    /// <summary>
    /// Only with <see cref="AllocationStatus.Unavailable"/>: the statement that would have
    /// answered this request failed in a way that leaves its outcome unknown (a dropped
    /// connection, a timeout): it may have committed. The caller retries with the same session key,
    /// which returns the allocation if one was made. <see langword="false"/>: nothing was written.
    /// </summary>
    public bool OutcomeUnknown { get; init; }

    public static AllocationOutcome NoCapacity(AllocationDecision decision = default) => new(AllocationStatus.NoCapacity, null, decision);

    /// <summary>A request not decided: see <see cref="AllocationStatus.Unavailable"/> and <see cref="OutcomeUnknown"/>.</summary>
    public static AllocationOutcome Unavailable(AllocationDecision decision = default, bool outcomeUnknown = false) =>
        new(AllocationStatus.Unavailable, null, decision) { OutcomeUnknown = outcomeUnknown };
}
