namespace Allocator;

/// <summary>Result of a release or renew; <see cref="Allocation"/> is the state after the call when known.</summary>
public sealed record LeaseResult(LeaseStatus Status, Allocation? Allocation);
