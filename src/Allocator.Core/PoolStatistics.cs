namespace Allocator;

/// <summary>A snapshot of a pool's workers and load.</summary>
public sealed record PoolStatistics
{
    public required string PoolId { get; init; }
    public required PoolSettings Settings { get; init; }

    /// <summary>Registered workers in any state.</summary>
    public required int Workers { get; init; }

    /// <summary>Workers in the available state.</summary>
    public required int AvailableWorkers { get; init; }

    /// <summary>Total slots over all workers.</summary>
    public required long Capacity { get; init; }

    /// <summary>Total slots in use over all workers.</summary>
    public required long Load { get; init; }

    /// <summary>Free slots on available workers.</summary>
    public required long FreeSlots { get; init; }

    public required long ActiveAllocations { get; init; }

    /// <summary>Lowest and highest load among available workers (0 when there are none).</summary>
    public required int MinLoad { get; init; }

    public required int MaxLoad { get; init; }

    /// <summary><see cref="MaxLoad"/> − <see cref="MinLoad"/>: the balance of the pool, in slots.</summary>
    public int LoadSpread => MaxLoad - MinLoad;

    /// <summary>Lowest and highest score among available workers, in <see cref="WorkerScore"/> units.</summary>
    public required long MinScore { get; init; }

    public required long MaxScore { get; init; }

    /// <summary>Load / capacity over all workers, 0–1.</summary>
    public double Utilization => Capacity == 0 ? 0 : (double)Load / Capacity;
}
