namespace Allocator.Storage.InMemory;

/// <summary>Options of <see cref="InMemoryWorkerStore"/>; the same knobs as the database stores.</summary>
public sealed class InMemoryWorkerStoreOptions
{
    /// <summary>Longest wait for a row lock in the blocking fallback and the strict strategy. Default: 5 s.</summary>
    public TimeSpan LockTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Fresh skip-locked attempts after one found only locked rows, before blocking. Default: 2.</summary>
    public int SkipRetries { get; set; } = 2;

    /// <summary>Upper bound of the random pause before each retry. Default: 5 ms.</summary>
    public TimeSpan RetryJitter { get; set; } = TimeSpan.FromMilliseconds(5);

    /// <summary>
    /// How long an ended allocation is kept: for that long a replay of its session key answers the
    /// ended allocation (never a second one) and its id reads as ended; the reaper forgets it
    /// afterwards. Default: 24 h.
    /// </summary>
    public TimeSpan HistoryRetention { get; set; } = TimeSpan.FromHours(24);

    /// <summary>Every problem with these options, each naming the option; empty when valid.</summary>
    public IReadOnlyList<string> Validate()
    {
        var errors = new List<string>();
        if (LockTimeout < TimeSpan.FromMilliseconds(1) || LockTimeout > TimeSpan.FromMinutes(10))
        {
            errors.Add("LockTimeout must be between 1 ms and 10 minutes.");
        }

        if (SkipRetries is < 0 or > 100)
        {
            errors.Add("SkipRetries must be between 0 and 100.");
        }

        if (RetryJitter < TimeSpan.Zero || RetryJitter > TimeSpan.FromSeconds(10))
        {
            errors.Add("RetryJitter must be between 0 and 10 seconds.");
        }

        if (HistoryRetention < TimeSpan.FromMilliseconds(1) || HistoryRetention > TimeSpan.FromDays(366))
        {
            errors.Add("HistoryRetention must be between 1 ms and 366 days.");
        }

        return errors;
    }
}
