namespace Allocator.InMemory;

/// <summary>Options of <see cref="InMemoryWorkerStore"/>; the same knobs as the database stores.</summary>
public sealed class InMemoryWorkerStoreOptions
{
    /// <summary>Longest wait for a row lock in the blocking fallback and the strict strategy. Default: 5 s.</summary>
    public TimeSpan LockTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Fresh skip-locked attempts after one found only locked rows, before blocking. Default: 2.</summary>
    public int SkipRetries { get; set; } = 2;

    /// <summary>Upper bound of the random pause before each retry. Default: 5 ms.</summary>
    public TimeSpan RetryJitter { get; set; } = TimeSpan.FromMilliseconds(5);
}
