namespace Allocator;

public enum WorkerUpdateStatus
{
    Ok,
    NotFound,

    /// <summary>The epoch given is not the worker's current registration epoch; nothing changed.</summary>
    StaleEpoch,
}
