using System.Collections.Concurrent;

namespace Allocator.LoadTests.Scenarios;

/// <summary>
/// Every successful reply a run received (and every release it made), for the audit: each reply
/// must have its committed row, and releases explain the load that is gone.
/// </summary>
internal sealed class AllocationLedger
{
    private readonly ConcurrentQueue<Allocation> _replies = new();
    private readonly ConcurrentDictionary<Guid, bool> _released = new();
    private long _excessScoreSum;
    private long _decisions;

    public IReadOnlyCollection<Allocation> Replies => _replies;

    public IReadOnlyCollection<Guid> AllocationIds => [.. _replies.Select(a => a.AllocationId)];

    public bool WasReleased(Guid allocationId) => _released.ContainsKey(allocationId);

    public void RecordReply(AllocationOutcome outcome)
    {
        if (outcome.Allocation is { } allocation)
        {
            _replies.Enqueue(allocation);
            Interlocked.Add(ref _excessScoreSum, outcome.Decision.ExcessScore);
            Interlocked.Increment(ref _decisions);
        }
    }

    public void RecordRelease(Guid allocationId) => _released[allocationId] = true;

    /// <summary>Mean excess of the chosen worker's score over the lowest eligible score, in load-index points (0–10000).</summary>
    public double MeanExcessLoadIndex()
    {
        var n = Interlocked.Read(ref _decisions);
        return n == 0 ? 0 : WorkerScore.ToLoadIndex(Interlocked.Read(ref _excessScoreSum)) / n;
    }
}
