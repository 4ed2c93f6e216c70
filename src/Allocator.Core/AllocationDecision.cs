namespace Allocator;

/// <summary>How a pick was made, for telemetry. Values describe the state at decision time.</summary>
/// <param name="Rank">Position of the chosen worker among eligible workers in the pool's placement order (score then id; reversed for <see cref="Placement.Pack"/>): 0 = its first choice.</param>
/// <param name="ExcessScore">How far the chosen worker's score is from the first choice's (the lowest eligible score; the highest for <see cref="Placement.Pack"/>), in <see cref="WorkerScore"/> units.</param>
/// <param name="RowsSkipped">Eligible workers ranked ahead of the chosen one that were passed over because another transaction held their row.</param>
/// <param name="BlockingFallback">Whether the pick came from the blocking (lock-waiting) fallback.</param>
/// <param name="Retries">Fresh statements issued after the first one found rows only locked.</param>
public readonly record struct AllocationDecision(int Rank, long ExcessScore, int RowsSkipped, bool BlockingFallback, int Retries);
