namespace Allocator;

public enum LeaseStatus
{
    Ok,

    /// <summary>No allocation with that id in that pool.</summary>
    NotFound,

    /// <summary>The allocation has already ended (released, expired or its worker deregistered).</summary>
    NotActive,

    /// <summary>The epoch given is not the allocation's current epoch; nothing changed.</summary>
    StaleEpoch,
}
