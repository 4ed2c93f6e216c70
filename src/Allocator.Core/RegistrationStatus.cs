namespace Allocator;

public enum RegistrationStatus
{
    /// <summary>A new worker, epoch 1.</summary>
    Created,

    /// <summary>
    /// An existing worker re-registered: address, capacity and tags replaced, epoch advanced,
    /// heartbeat refreshed, an offline worker made available again. Live allocations and load
    /// are kept (the worker still hosts those sessions) and a draining worker stays draining.
    /// </summary>
    Updated,

    /// <summary>
    /// Rejected, nothing changed: the new capacity is below the worker's current load. Drain
    /// the worker and wait for its load to fall first. Keeps 0 ≤ load ≤ capacity.
    /// </summary>
    CapacityBelowLoad,
}
