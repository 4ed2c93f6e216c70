namespace Allocator;

public enum AllocationStatus
{
    /// <summary>A new allocation was made.</summary>
    Allocated,

    /// <summary>The session key already had an active allocation; it is returned unchanged.</summary>
    Existing,

    /// <summary>No eligible worker has room (checked after skipping, retrying and a blocking wait).</summary>
    NoCapacity,

    /// <summary>
    /// Undecided: every eligible row with room stayed locked past the store's lock timeout.
    /// Nothing was written for this request (other requests of the same batch may have been
    /// allocated and committed); retrying with the same session key is safe.
    /// </summary>
    Unavailable,
}
