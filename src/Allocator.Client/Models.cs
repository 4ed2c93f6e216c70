namespace Allocator.Client;

// Wire shapes of the Allocator /v1 API, owned by the client so brokers can take it standalone.

/// <summary>Pool settings for <see cref="AllocatorClient.PutPoolAsync"/>; null members take the server's defaults.</summary>
public sealed record PoolSettings
{
    /// <summary><c>skip-locked</c> (default) or <c>strict</c>.</summary>
    public string? Strategy { get; init; }

    public int? DefaultLeaseSeconds { get; init; }

    public int? MaxWaitMs { get; init; }

    public int? HeartbeatTimeoutSeconds { get; init; }

    public bool? SerializeRegistrations { get; init; }

    /// <summary><c>spread</c> (default: the least-loaded worker that fits) or <c>pack</c> (the most-loaded that fits, so idle workers can be scaled down).</summary>
    public string? Placement { get; init; }

    /// <summary>The database a new pool is placed on (a service with several databases); null: the service's rule (the fewest pools).</summary>
    public string? Database { get; init; }
}

public sealed record PoolInfo(
    string PoolId,
    string Strategy,
    int? DefaultLeaseSeconds,
    int MaxWaitMs,
    int? HeartbeatTimeoutSeconds,
    bool SerializeRegistrations)
{
    /// <summary>The database that holds the pool.</summary>
    public string? Database { get; init; }

    /// <summary><c>spread</c> or <c>pack</c>; null from a server older than 1.1.0 (which places spread).</summary>
    public string? Placement { get; init; }
}

public sealed record PoolStatistics(
    string PoolId,
    string Strategy,
    int? DefaultLeaseSeconds,
    int MaxWaitMs,
    int Workers,
    int AvailableWorkers,
    long Capacity,
    long Load,
    long FreeSlots,
    long ActiveAllocations,
    int MinLoad,
    int MaxLoad,
    int LoadSpread,
    double Utilization,
    int Waiters,
    string? GrainSilo = null)
{
    /// <summary>The database that holds the pool.</summary>
    public string? Database { get; init; }

    /// <summary><c>spread</c> or <c>pack</c>; null from a server older than 1.1.0 (which places spread).</summary>
    public string? Placement { get; init; }

    /// <summary>The pool's recent demand and the workers wanted for it (docs/placement.md, "Demand"); null from a server older than 1.1.0.</summary>
    public PoolDemand? Demand { get; init; }
}

/// <summary>A pool's demand over the server's window, and the workers an autoscaler should run for it.</summary>
/// <param name="WindowSeconds">How far back the counts reach.</param>
/// <param name="ArrivalsPerSecond">Allocation requests per second.</param>
/// <param name="UnitsPerSecond">Units they asked for, per second.</param>
/// <param name="NoCapacityAnswers">Requests answered "no capacity" within the window.</param>
/// <param name="Waiters">Callers waiting for capacity now.</param>
/// <param name="PeakWaiters">The most callers waiting at once within the window.</param>
/// <param name="DemandSlots">Slots in use, waited for and refused.</param>
/// <param name="BufferSlots">Idle room kept on top (the server's buffer settings).</param>
/// <param name="SlotsPerWorker">The mean capacity of the pool's workers.</param>
/// <param name="WorkersWanted">Workers to run for the demand and the buffer.</param>
public sealed record PoolDemand(
    int WindowSeconds,
    double ArrivalsPerSecond,
    double UnitsPerSecond,
    long NoCapacityAnswers,
    int Waiters,
    int PeakWaiters,
    long DemandSlots,
    long BufferSlots,
    double SlotsPerWorker,
    long WorkersWanted);

/// <summary>A worker's registration for <see cref="AllocatorClient.RegisterWorkerAsync"/>.</summary>
public sealed record WorkerRegistration(string Address, int Capacity, IReadOnlyList<string>? Tags = null);

/// <summary>One entry of <see cref="AllocatorClient.RegisterWorkersAsync"/>.</summary>
public sealed record WorkerBatchEntry(string WorkerId, string Address, int Capacity, IReadOnlyList<string>? Tags = null);

public sealed record WorkerInfo(
    string PoolId,
    string WorkerId,
    string Address,
    int Capacity,
    int Load,
    int? LoadIndex,
    string State,
    IReadOnlyList<string> Tags,
    long Epoch,
    DateTimeOffset LastHeartbeat);

/// <summary><see cref="Status"/> is <c>created</c>, <c>updated</c> or <c>capacity-below-load</c>.</summary>
public sealed record RegistrationResult(string WorkerId, string Status, WorkerInfo Worker);

public sealed record DeregistrationResult(string WorkerId, int AllocationsEnded);

/// <summary>What a broker asks for. The idempotency key is passed separately (header).</summary>
public sealed record AllocateRequest
{
    /// <summary>Slots on one worker. Default (null): 1.</summary>
    public int? Units { get; init; }

    /// <summary>Tags the worker must all carry.</summary>
    public IReadOnlyList<string>? Tags { get; init; }

    /// <summary>Longest to wait for capacity, in ms (bounded by the pool's maximum). Default: 0.</summary>
    public int? MaxWaitMs { get; init; }

    /// <summary>Lease in seconds. Default: the pool's default lease.</summary>
    public int? LeaseSeconds { get; init; }
}

/// <summary>The body of <c>POST /v1/allocations</c>.</summary>
internal sealed record AllocateAnyBody(IReadOnlyList<string> Pools, int? Units, IReadOnlyList<string>? Tags, int? MaxWaitMs, int? LeaseSeconds);

public sealed record AllocationInfo(
    Guid AllocationId,
    string PoolId,
    string WorkerId,
    string Address,
    string SessionKey,
    int Units,
    long Epoch,
    DateTimeOffset CreatedAt,
    DateTimeOffset? ExpiresAt,
    DateTimeOffset? EndedAt,
    bool Active);

public enum AllocateStatus
{
    /// <summary>A new allocation (HTTP 201).</summary>
    Allocated,

    /// <summary>The idempotency key already held this allocation; it is returned unchanged (HTTP 200).</summary>
    Existing,

    /// <summary>No eligible worker had room within the wait (HTTP 409, problem type no-capacity).</summary>
    NoCapacity,
}

/// <summary>The answer to an allocate call. No exception on the hot path: check <see cref="Status"/>.</summary>
public readonly record struct AllocateResult(AllocateStatus Status, AllocationInfo? Allocation, string? Detail)
{
    public bool Succeeded => Allocation is not null;
}
