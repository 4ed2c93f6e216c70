namespace Allocator;

/// <summary>A worker as the store holds it.</summary>
public sealed record Worker
{
    public required string PoolId { get; init; }
    public required string WorkerId { get; init; }
    public required string Address { get; init; }

    /// <summary>Slots.</summary>
    public required int Capacity { get; init; }

    /// <summary>Slots in use: always the units of the worker's active allocations.</summary>
    public required int Load { get; init; }

    /// <summary>The worker's own load evaluation, 0–10000, when it reports one.</summary>
    public int? ReportedLoadIndex { get; init; }

    public required WorkerState State { get; init; }
    public required IReadOnlyList<string> Tags { get; init; }

    /// <summary>Registration epoch: 1 at the first registration, one higher at each re-registration.</summary>
    public required long Epoch { get; init; }

    /// <summary>Last registration or load report, in database time.</summary>
    public required DateTimeOffset LastHeartbeat { get; init; }

    public long Score => WorkerScore.Compute(Load, Capacity, ReportedLoadIndex);
}

/// <summary>What a worker says about itself when it registers.</summary>
public sealed record WorkerRegistration(string WorkerId, string Address, int Capacity, IReadOnlyList<string>? Tags = null);

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

public sealed record RegistrationOutcome(string WorkerId, RegistrationStatus Status, Worker Worker);

/// <summary>
/// Result of deregistering a worker. The worker row is removed and its active allocations are
/// ended with reason <c>worker-deregistered</c>; releasing one of them later reports
/// <see cref="LeaseStatus.NotActive"/>.
/// </summary>
public sealed record DeregistrationResult(bool Found, int AllocationsEnded);

public enum WorkerUpdateStatus
{
    Ok,
    NotFound,

    /// <summary>The epoch given is not the worker's current registration epoch; nothing changed.</summary>
    StaleEpoch,
}
