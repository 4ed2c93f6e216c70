using Orleans.Serialization.Cloning;

namespace Allocator.Grains.Serialization;

// The domain types of Allocator.Core cross silos in grain calls, but Core takes no dependency on
// Orleans: each gets a surrogate here (a [GenerateSerializer] struct with stable field ids) and a
// converter. Enums travel as their numeric values. The records are immutable once built, so a
// call between grains of one silo passes them as they are (shallow copiers) instead of copying.

[GenerateSerializer]
[Immutable]
[Alias("allocator.allocation-request")]
internal struct AllocationRequestSurrogate
{
    [Id(0)] public string SessionKey;
    [Id(1)] public int Units;
    [Id(2)] public string[]? RequiredTags;
    [Id(3)] public TimeSpan? Lease;
    [Id(4)] public DateTimeOffset? Deadline;
    [Id(5)] public TimeSpan? FallbackLease;
    [Id(6)] public string? Owner;
}

[RegisterConverter]
internal sealed class AllocationRequestConverter : IConverter<AllocationRequest, AllocationRequestSurrogate>
{
    public AllocationRequest ConvertFromSurrogate(in AllocationRequestSurrogate surrogate) =>
        new(surrogate.SessionKey, surrogate.Units, surrogate.RequiredTags, surrogate.Lease, surrogate.Deadline) { FallbackLease = surrogate.FallbackLease, Owner = surrogate.Owner };

    public AllocationRequestSurrogate ConvertToSurrogate(in AllocationRequest value) => new()
    {
        SessionKey = value.SessionKey,
        Units = value.Units,
        RequiredTags = value.RequiredTags is null ? null : [.. value.RequiredTags],
        Lease = value.Lease,
        Deadline = value.Deadline,
        FallbackLease = value.FallbackLease,
        Owner = value.Owner,
    };
}

[RegisterCopier]
internal sealed class AllocationRequestCopier : ShallowCopier<AllocationRequest>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.allocation")]
internal struct AllocationSurrogate
{
    [Id(0)] public Guid AllocationId;
    [Id(1)] public string PoolId;
    [Id(2)] public string WorkerId;
    [Id(3)] public string Address;
    [Id(4)] public string SessionKey;
    [Id(5)] public int Units;
    [Id(6)] public long Epoch;
    [Id(7)] public DateTimeOffset CreatedAt;
    [Id(8)] public DateTimeOffset? ExpiresAt;
    [Id(9)] public DateTimeOffset? EndedAt;
    [Id(10)] public string? Owner;
}

[RegisterConverter]
internal sealed class AllocationConverter : IConverter<Allocation, AllocationSurrogate>
{
    public Allocation ConvertFromSurrogate(in AllocationSurrogate surrogate) => new()
    {
        AllocationId = surrogate.AllocationId,
        PoolId = surrogate.PoolId,
        WorkerId = surrogate.WorkerId,
        Address = surrogate.Address,
        SessionKey = surrogate.SessionKey,
        Units = surrogate.Units,
        Epoch = surrogate.Epoch,
        CreatedAt = surrogate.CreatedAt,
        ExpiresAt = surrogate.ExpiresAt,
        EndedAt = surrogate.EndedAt,
        Owner = surrogate.Owner,
    };

    public AllocationSurrogate ConvertToSurrogate(in Allocation value) => new()
    {
        AllocationId = value.AllocationId,
        PoolId = value.PoolId,
        WorkerId = value.WorkerId,
        Address = value.Address,
        SessionKey = value.SessionKey,
        Units = value.Units,
        Epoch = value.Epoch,
        CreatedAt = value.CreatedAt,
        ExpiresAt = value.ExpiresAt,
        EndedAt = value.EndedAt,
        Owner = value.Owner,
    };
}

[RegisterCopier]
internal sealed class AllocationCopier : ShallowCopier<Allocation>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.allocation-outcome")]
internal struct AllocationOutcomeSurrogate
{
    [Id(0)] public int Status;
    [Id(1)] public Allocation? Allocation;
    [Id(2)] public int Rank;
    [Id(3)] public long ExcessScore;
    [Id(4)] public int RowsSkipped;
    [Id(5)] public bool BlockingFallback;
    [Id(6)] public int Retries;
    [Id(7)] public bool OutcomeUnknown;
}

[RegisterConverter]
internal sealed class AllocationOutcomeConverter : IConverter<AllocationOutcome, AllocationOutcomeSurrogate>
{
    public AllocationOutcome ConvertFromSurrogate(in AllocationOutcomeSurrogate surrogate) => new(
        (AllocationStatus)surrogate.Status,
        surrogate.Allocation,
        new AllocationDecision(surrogate.Rank, surrogate.ExcessScore, surrogate.RowsSkipped, surrogate.BlockingFallback, surrogate.Retries))
    {
        OutcomeUnknown = surrogate.OutcomeUnknown,
    };

    public AllocationOutcomeSurrogate ConvertToSurrogate(in AllocationOutcome value) => new()
    {
        Status = (int)value.Status,
        Allocation = value.Allocation,
        Rank = value.Decision.Rank,
        ExcessScore = value.Decision.ExcessScore,
        RowsSkipped = value.Decision.RowsSkipped,
        BlockingFallback = value.Decision.BlockingFallback,
        Retries = value.Decision.Retries,
        OutcomeUnknown = value.OutcomeUnknown,
    };
}

[RegisterCopier]
internal sealed class AllocationOutcomeCopier : ShallowCopier<AllocationOutcome>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.lease-result")]
internal struct LeaseResultSurrogate
{
    [Id(0)] public int Status;
    [Id(1)] public Allocation? Allocation;
}

[RegisterConverter]
internal sealed class LeaseResultConverter : IConverter<LeaseResult, LeaseResultSurrogate>
{
    public LeaseResult ConvertFromSurrogate(in LeaseResultSurrogate surrogate) => new((LeaseStatus)surrogate.Status, surrogate.Allocation);

    public LeaseResultSurrogate ConvertToSurrogate(in LeaseResult value) => new() { Status = (int)value.Status, Allocation = value.Allocation };
}

[RegisterCopier]
internal sealed class LeaseResultCopier : ShallowCopier<LeaseResult>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.worker-registration")]
internal struct WorkerRegistrationSurrogate
{
    [Id(0)] public string WorkerId;
    [Id(1)] public string Address;
    [Id(2)] public int Capacity;
    [Id(3)] public string[]? Tags;
}

[RegisterConverter]
internal sealed class WorkerRegistrationConverter : IConverter<WorkerRegistration, WorkerRegistrationSurrogate>
{
    public WorkerRegistration ConvertFromSurrogate(in WorkerRegistrationSurrogate surrogate) =>
        new(surrogate.WorkerId, surrogate.Address, surrogate.Capacity, surrogate.Tags);

    public WorkerRegistrationSurrogate ConvertToSurrogate(in WorkerRegistration value) => new()
    {
        WorkerId = value.WorkerId,
        Address = value.Address,
        Capacity = value.Capacity,
        Tags = value.Tags is null ? null : [.. value.Tags],
    };
}

[RegisterCopier]
internal sealed class WorkerRegistrationCopier : ShallowCopier<WorkerRegistration>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.worker")]
internal struct WorkerSurrogate
{
    [Id(0)] public string PoolId;
    [Id(1)] public string WorkerId;
    [Id(2)] public string Address;
    [Id(3)] public int Capacity;
    [Id(4)] public int Load;
    [Id(5)] public int? ReportedLoadIndex;
    [Id(6)] public int State;
    [Id(7)] public string[] Tags;
    [Id(8)] public long Epoch;
    [Id(9)] public DateTimeOffset LastHeartbeat;
}

[RegisterConverter]
internal sealed class WorkerConverter : IConverter<Worker, WorkerSurrogate>
{
    public Worker ConvertFromSurrogate(in WorkerSurrogate surrogate) => new()
    {
        PoolId = surrogate.PoolId,
        WorkerId = surrogate.WorkerId,
        Address = surrogate.Address,
        Capacity = surrogate.Capacity,
        Load = surrogate.Load,
        ReportedLoadIndex = surrogate.ReportedLoadIndex,
        State = (WorkerState)surrogate.State,
        Tags = surrogate.Tags ?? [],
        Epoch = surrogate.Epoch,
        LastHeartbeat = surrogate.LastHeartbeat,
    };

    public WorkerSurrogate ConvertToSurrogate(in Worker value) => new()
    {
        PoolId = value.PoolId,
        WorkerId = value.WorkerId,
        Address = value.Address,
        Capacity = value.Capacity,
        Load = value.Load,
        ReportedLoadIndex = value.ReportedLoadIndex,
        State = (int)value.State,
        Tags = [.. value.Tags],
        Epoch = value.Epoch,
        LastHeartbeat = value.LastHeartbeat,
    };
}

[RegisterCopier]
internal sealed class WorkerCopier : ShallowCopier<Worker>;

[GenerateSerializer]
[Immutable]
[Alias("allocator.registration-outcome")]
internal struct RegistrationOutcomeSurrogate
{
    [Id(0)] public string WorkerId;
    [Id(1)] public int Status;
    [Id(2)] public Worker Worker;
}

[RegisterConverter]
internal sealed class RegistrationOutcomeConverter : IConverter<RegistrationOutcome, RegistrationOutcomeSurrogate>
{
    public RegistrationOutcome ConvertFromSurrogate(in RegistrationOutcomeSurrogate surrogate) =>
        new(surrogate.WorkerId, (RegistrationStatus)surrogate.Status, surrogate.Worker);

    public RegistrationOutcomeSurrogate ConvertToSurrogate(in RegistrationOutcome value) => new()
    {
        WorkerId = value.WorkerId,
        Status = (int)value.Status,
        Worker = value.Worker,
    };
}

[RegisterCopier]
internal sealed class RegistrationOutcomeCopier : ShallowCopier<RegistrationOutcome>;

/// <summary>
/// An <see cref="AllocatorException"/> keeps its kind (and so its HTTP status) when it crosses
/// silos; without this it would arrive as Orleans' fallback exception with the message only.
/// </summary>
[GenerateSerializer]
[Immutable]
[Alias("allocator.allocator-exception")]
internal struct AllocatorExceptionSurrogate
{
    [Id(0)] public int Kind;
    [Id(1)] public string Message;
    [Id(2)] public bool OutcomeUnknown;
}

[RegisterConverter]
internal sealed class AllocatorExceptionConverter : IConverter<AllocatorException, AllocatorExceptionSurrogate>
{
    public AllocatorException ConvertFromSurrogate(in AllocatorExceptionSurrogate surrogate) =>
        new((AllocatorErrorKind)surrogate.Kind, surrogate.Message, surrogate.OutcomeUnknown, innerException: null);

    public AllocatorExceptionSurrogate ConvertToSurrogate(in AllocatorException value) => new()
    {
        Kind = (int)value.Kind,
        Message = value.Message,
        OutcomeUnknown = value.OutcomeUnknown,
    };
}
