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

    /// <summary>
    /// Which eligible worker is filled first. Default: <see cref="Placement.Spread"/> (the
    /// least-loaded); <see cref="Placement.Pack"/> takes the most-loaded that fits.
    /// </summary>
    public Placement Placement { get; init; } = Placement.Spread;

    public static PoolSettings Default { get; } = new();
}
