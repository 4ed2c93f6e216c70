namespace Allocator;

/// <summary>How a pool picks a worker for each request.</summary>
public enum AllocationStrategy
{
    /// <summary>
    /// Take the least-loaded worker whose row is not locked by another transaction (skip locked
    /// rows). "Good enough" balance without serializing callers. The default.
    /// </summary>
    SkipLocked = 0,

    /// <summary>
    /// Wait for the lock on the true least-loaded worker. Perfect balance; callers on one pool
    /// serialize on the hottest row.
    /// </summary>
    Strict = 1,
}
