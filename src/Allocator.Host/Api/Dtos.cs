namespace Allocator.Host.Api;

// Wire shapes of the /v1 API. Unknown members, missing required members, nulls where a value
// is required and numbers sent as strings are all rejected by the serializer (400).

/// <summary>PUT /v1/pools/{pool}: the whole settings; members left out take their defaults.</summary>
internal sealed record PoolSettingsBody
{
    /// <summary><c>skip-locked</c> (default) or <c>strict</c>.</summary>
    public string? Strategy { get; init; }

    /// <summary>Lease of allocations that name none, 1 s – 30 days; null: no expiry.</summary>
    public int? DefaultLeaseSeconds { get; init; }

    /// <summary>Longest a caller may wait for capacity, 0 – 600000 ms. Default 0.</summary>
    public int? MaxWaitMs { get; init; }

    /// <summary>Workers without a heartbeat for this long are not eligible; null: not required.</summary>
    public int? HeartbeatTimeoutSeconds { get; init; }

    public bool? SerializeRegistrations { get; init; }

    /// <summary><c>spread</c> (default: the least-loaded worker that fits) or <c>pack</c> (the most-loaded that fits).</summary>
    public string? Placement { get; init; }

    /// <summary>
    /// The database a new pool is placed on (a name of <c>Allocator:Databases</c>). Default: the
    /// database with the fewest pools. An existing pool stays where it is (409 when another is
    /// named; move it with <c>POST /v1/pools/{pool}/move</c>).
    /// </summary>
    public string? Database { get; init; }
}

internal sealed record PoolResponse(
    string PoolId,
    string Strategy,
    int? DefaultLeaseSeconds,
    int MaxWaitMs,
    int? HeartbeatTimeoutSeconds,
    bool SerializeRegistrations,
    string Database,
    string Placement);

/// <summary>POST /v1/pools/{pool}/move: the database to move a drained, empty pool to.</summary>
internal sealed record MovePoolBody
{
    public required string Database { get; init; }
}

/// <summary>Where the pool was and is; <c>moved</c> false when it was there already (or a move was cancelled).</summary>
internal sealed record PoolMoveResponse(string PoolId, string Database, string PreviousDatabase, bool Moved);

internal sealed record PoolStatisticsResponse(
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
    string GrainSilo,
    string Database,
    string Placement,
    Demand.DemandEstimate? Demand);

/// <summary>PUT /v1/pools/{pool}/workers/{worker}.</summary>
internal sealed record WorkerBody
{
    public required string Address { get; init; }

    public required int Capacity { get; init; }

    public IReadOnlyList<string>? Tags { get; init; }
}

/// <summary>One entry of POST /v1/pools/{pool}/workers.</summary>
internal sealed record WorkerBatchEntry
{
    public required string WorkerId { get; init; }

    public required string Address { get; init; }

    public required int Capacity { get; init; }

    public IReadOnlyList<string>? Tags { get; init; }
}

internal sealed record WorkerBatchBody
{
    /// <summary>
    /// Nullable entries on purpose: the serializer's nullable checks do not reach inside
    /// collections, so <c>[null]</c> arrives as a null entry and the endpoint rejects it (400).
    /// </summary>
    public required IReadOnlyList<WorkerBatchEntry?> Workers { get; init; }
}

internal sealed record WorkerResponse(
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

/// <summary>Outcome of one registration: <c>created</c>, <c>updated</c> or <c>capacity-below-load</c>.</summary>
internal sealed record RegistrationResponse(string WorkerId, string Status, WorkerResponse Worker);

internal sealed record WorkerBatchResponse(IReadOnlyList<RegistrationResponse> Results);

internal sealed record DeregistrationResponse(string WorkerId, int AllocationsEnded);

/// <summary>POST …/workers/{worker}/load: the registration epoch and an optional load index (0–10000).</summary>
internal sealed record LoadReportBody
{
    public required long Epoch { get; init; }

    public int? LoadIndex { get; init; }
}

/// <summary>POST /v1/pools/{pool}/allocations.</summary>
internal record AllocateBody
{
    /// <summary>Idempotency key, when the <c>Idempotency-Key</c> header is not used.</summary>
    public string? SessionKey { get; init; }

    /// <summary>Slots on one worker. Default 1.</summary>
    public int? Units { get; init; }

    /// <summary>Tags the worker must all carry.</summary>
    public IReadOnlyList<string>? Tags { get; init; }

    /// <summary>Longest to wait for capacity, 0 – 600000 ms (bounded by the pool's maximum). Default 0.</summary>
    public int? MaxWaitMs { get; init; }

    /// <summary>Lease, 1 s – 30 days. Default: the pool's default lease.</summary>
    public int? LeaseSeconds { get; init; }
}

/// <summary>POST /v1/allocations: an allocation in the first of several pools with room (ADR 0036).</summary>
internal sealed record AllocateAnyBody : AllocateBody
{
    /// <summary>The pools to try, in order of preference: 1 to 8, none twice.</summary>
    public IReadOnlyList<string>? Pools { get; init; }
}

/// <summary>POST …/allocations/{id}/renew.</summary>
internal sealed record RenewBody
{
    public required long Epoch { get; init; }

    public int? LeaseSeconds { get; init; }
}

internal sealed record AllocationResponse(
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
