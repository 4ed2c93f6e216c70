namespace Allocator;

/// <summary>How a pick was made, for telemetry. Values describe the state at decision time.</summary>
/// <param name="Rank">Position of the chosen worker among eligible workers ordered by score then id (0 = least loaded).</param>
/// <param name="ExcessScore">Chosen worker's score minus the lowest eligible score, in <see cref="WorkerScore"/> units.</param>
/// <param name="RowsSkipped">Eligible workers ranked ahead of the chosen one that were passed over because another transaction held their row.</param>
/// <param name="BlockingFallback">Whether the pick came from the blocking (lock-waiting) fallback.</param>
/// <param name="Retries">Fresh statements issued after the first one found rows only locked.</param>
public readonly record struct AllocationDecision(int Rank, long ExcessScore, int RowsSkipped, bool BlockingFallback, int Retries);
