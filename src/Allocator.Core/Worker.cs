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
