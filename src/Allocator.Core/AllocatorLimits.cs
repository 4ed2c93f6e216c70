namespace Allocator;

/// <summary>
/// Bounds on every value the domain accepts. Stores, the host and the client all validate
/// against these, so a value that passes here never fails a database constraint.
/// </summary>
public static class AllocatorLimits
{
    /// <summary>Longest pool or worker id, in characters.</summary>
    public const int MaxIdLength = 128;

    /// <summary>Longest session (idempotency) key, in characters.</summary>
    public const int MaxSessionKeyLength = 200;

    /// <summary>Longest worker address, in characters.</summary>
    public const int MaxAddressLength = 512;

    /// <summary>Longest tag, in characters.</summary>
    public const int MaxTagLength = 64;

    /// <summary>Most tags on a worker or required by a request.</summary>
    public const int MaxTags = 32;

    /// <summary>
    /// Largest worker capacity (slots). Bounded so that <c>load * ScoreScale</c> fits a 64-bit
    /// integer in every store.
    /// </summary>
    public const int MaxCapacity = 1_000_000;

    /// <summary>Highest reported load index a worker may send (0 is idle, 10000 is full).</summary>
    public const int MaxLoadIndex = 10_000;

    /// <summary>Most requests a store accepts in one allocation batch.</summary>
    public const int MaxBatchSize = 1_000;

    /// <summary>Most workers a store accepts in one registration call.</summary>
    public const int MaxRegistrationBatch = 10_000;

    /// <summary>Shortest lease.</summary>
    public static readonly TimeSpan MinLease = TimeSpan.FromSeconds(1);

    /// <summary>Longest lease (30 days).</summary>
    public static readonly TimeSpan MaxLease = TimeSpan.FromDays(30);

    /// <summary>Longest time a caller may wait for capacity (10 minutes).</summary>
    public static readonly TimeSpan MaxWait = TimeSpan.FromMinutes(10);
}
