namespace Allocator;

/// <summary>Whether a worker takes new allocations.</summary>
public enum WorkerState
{
    /// <summary>Takes new allocations while it has room.</summary>
    Available = 0,

    /// <summary>Keeps its allocations but takes no new ones (set by drain, cleared by undrain).</summary>
    Draining = 1,

    /// <summary>Takes no new allocations; a re-registration brings it back to available.</summary>
    Offline = 2,
}
