using System.Text.Json.Serialization;

namespace Allocator.Reliability.History;

/// <summary>What a client call did, as far as the client can know.</summary>
[JsonConverter(typeof(JsonStringEnumConverter<Outcome>))]
internal enum Outcome
{
    /// <summary>Not answered yet.</summary>
    Pending,

    /// <summary>2xx: done, and the reply says what.</summary>
    Ok,

    /// <summary>A definite refusal: 4xx, or 503 <c>unavailable</c> ("nothing was written"). The service promises nothing changed.</summary>
    Fail,

    /// <summary>The outcome is unknown: 503 <c>outcome-unknown</c>, 504, 500, no answer, a dropped connection or the client's own timeout.</summary>
    Unknown,
}

[JsonConverter(typeof(JsonStringEnumConverter<OperationKind>))]
internal enum OperationKind
{
    PutPool,
    Allocate,
    Release,
    Renew,
    Register,
    RegisterBatch,
    Deregister,
    Drain,
    Undrain,
    ReportLoad,
    GetAllocation,
}

/// <summary>An allocation as a reply described it.</summary>
internal sealed record AllocationReply(Guid AllocationId, string WorkerId, int Units, long Epoch, DateTimeOffset CreatedAt, DateTimeOffset? ExpiresAt, bool Active);

/// <summary>
/// One client call: invoked, then answered ok / fail / unknown, with its idempotency key and reply.
/// Times are the client's (the machine's clock); durations come from a monotonic stopwatch.
/// </summary>
internal sealed class Operation
{
    public required long Id { get; init; }

    public required string Client { get; init; }

    /// <summary>The tenant of the API key the call was made with (issue 22).</summary>
    public string Tenant { get; init; } = Cluster.HostCluster.ApiKeyTenant;

    /// <summary>The host instance (0-based) the call went to.</summary>
    public required int Instance { get; init; }

    public required OperationKind Kind { get; init; }

    public required string Pool { get; init; }

    /// <summary>A preferred-pools allocate (ADR 0036): the pools it named, in order; null for a one-pool call.</summary>
    public IReadOnlyList<string>? Pools { get; init; }

    /// <summary>A preferred-pools allocate answered with an allocation: the pool that answered (its <c>poolId</c>).</summary>
    public string? AnsweredPool { get; set; }

    public string? Key { get; init; }

    public string? WorkerId { get; init; }

    public Guid? AllocationId { get; init; }

    /// <summary>The epoch sent (release, renew, load report).</summary>
    public long? Epoch { get; init; }

    public int? Units { get; init; }

    public int? Capacity { get; init; }

    public TimeSpan? Lease { get; init; }

    public TimeSpan MaxWait { get; init; }

    /// <summary>Sent on purpose with an epoch the client knows to be stale.</summary>
    public bool KnownStale { get; init; }

    public required DateTimeOffset InvokedAt { get; init; }

    public DateTimeOffset CompletedAt { get; set; }

    public TimeSpan Duration { get; set; }

    public Outcome Outcome { get; set; }

    /// <summary>HTTP status; 0 when there was no answer.</summary>
    public int Status { get; set; }

    /// <summary>The problem type's last segment (<c>no-capacity</c>, <c>outcome-unknown</c>, …), or the client-side failure.</summary>
    public string? Problem { get; set; }

    public AllocationReply? Allocation { get; set; }

    /// <summary>Registration replies: the worker's epoch.</summary>
    public long? WorkerEpoch { get; set; }

    /// <summary>The answer's <c>Retry-After</c> (every 503 must carry one); null: none.</summary>
    public TimeSpan? RetryAfter { get; set; }

    /// <summary>The client gave up waiting (its own timeout, shorter than the service's).</summary>
    public bool ClientTimeout { get; set; }

    public string? Detail { get; set; }

    /// <summary>
    /// The call as the checker of one pool sees it: a preferred-pools allocate answered with an
    /// allocation is a call on the pool that answered; any other one (failed, unknown, pending)
    /// is a call in flight on every pool it named, since any of them may hold what it did.
    /// </summary>
    public IEnumerable<Operation> PerPool() => Pools is null
        ? [this]
        : AnsweredPool is { } answered ? [At(answered)] : Pools.Select(At);

    private Operation At(string pool) => new()
    {
        Id = Id, Client = Client, Tenant = Tenant, Instance = Instance, Kind = Kind, Pool = pool, Pools = Pools, AnsweredPool = AnsweredPool,
        Key = Key, WorkerId = WorkerId, AllocationId = AllocationId, Epoch = Epoch, Units = Units, Capacity = Capacity, Lease = Lease,
        MaxWait = MaxWait, KnownStale = KnownStale, InvokedAt = InvokedAt, CompletedAt = CompletedAt, Duration = Duration, Outcome = Outcome,
        Status = Status, Problem = Problem, Allocation = Allocation, WorkerEpoch = WorkerEpoch, RetryAfter = RetryAfter, ClientTimeout = ClientTimeout, Detail = Detail,
    };

    public override string ToString() =>
        $"#{Id} {Client}@{Instance} {Kind} {Pool}{(Key is null ? "" : $" key {Key}")}{(WorkerId is null ? "" : $" worker {WorkerId}")}{(AllocationId is null ? "" : $" id {AllocationId}")}{(Epoch is null ? "" : $" epoch {Epoch}")}"
        + $" -> {Outcome} {Status}{(Problem is null ? "" : " " + Problem)} in {Duration.TotalMilliseconds:0} ms";
}
