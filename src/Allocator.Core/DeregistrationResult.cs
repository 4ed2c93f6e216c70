namespace Allocator;

/// <summary>
/// Result of deregistering a worker. The worker row is removed and its active allocations are
/// ended with reason <c>worker-deregistered</c>; releasing one of them later reports
/// <see cref="LeaseStatus.NotActive"/>.
/// </summary>
public sealed record DeregistrationResult(bool Found, int AllocationsEnded);
