namespace Allocator;

/// <summary>The answer to one request of a batch.</summary>
public sealed record AllocationOutcome(AllocationStatus Status, Allocation? Allocation, AllocationDecision Decision)
{
    public static AllocationOutcome NoCapacity(AllocationDecision decision = default) => new(AllocationStatus.NoCapacity, null, decision);
}
