namespace Allocator;

/// <summary>How an allocation ended.</summary>
public enum AllocationEndReason
{
    /// <summary>A release presenting its epoch ended it (its holder's, or the service's for a caller that gave up).</summary>
    Released,

    /// <summary>Its lease ran out.</summary>
    Expired,

    /// <summary>Its worker was deregistered while it was active.</summary>
    WorkerDeregistered,
}
