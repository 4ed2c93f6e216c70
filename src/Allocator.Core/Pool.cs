namespace Allocator;

/// <summary>Runtime settings of a pool, kept in the store so every instance sees changes.</summary>
public sealed record PoolSettings
{
    /// <summary>Selection strategy. Default: <see cref="AllocationStrategy.SkipLocked"/>.</summary>
    public AllocationStrategy Strategy { get; init; } = AllocationStrategy.SkipLocked;

    /// <summary>Lease given to requests that name none. Default: none (allocations never expire).</summary>
    public TimeSpan? DefaultLease { get; init; }

    /// <summary>Longest a caller may wait for capacity in this pool. Default: 0 (answer at once).</summary>
    public TimeSpan MaxWait { get; init; } = TimeSpan.Zero;

    /// <summary>
    /// When set, a worker whose last heartbeat is older than this is not eligible.
    /// Default: none (heartbeats are not required).
    /// </summary>
    public TimeSpan? HeartbeatTimeout { get; init; }

    /// <summary>
    /// When true, registrations for this pool are applied one batch at a time. Default: false
    /// (batches may overlap; rows are always locked in (pool, worker id) order either way).
    /// </summary>
    public bool SerializeRegistrations { get; init; }

    public static PoolSettings Default { get; } = new();
}

/// <summary>A named set of workers and its settings.</summary>
public sealed record Pool(string PoolId, PoolSettings Settings);

/// <summary>Result of creating or updating a pool.</summary>
public sealed record PoolUpsertResult(Pool Pool, bool Created);

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
