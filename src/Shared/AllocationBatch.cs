namespace Allocator.Storage.Internal;

/// <summary>
/// The outcomes of one allocation call while its statements run: each request is decided once,
/// reported through the caller's <c>onCommitted</c> as soon as its statement committed (at the
/// latest when the call completes), and a failure after anything committed decides the rest
/// instead of throwing the committed work away.
/// </summary>
/// <remarks>
/// One source file compiled into both database stores (linked from <c>src/Shared</c>, internal to
/// each): the dialects differ, but the <c>onCommitted</c> contract (each request decided and reported
/// exactly once, committed work never thrown away) must not drift between them.
/// </remarks>
internal sealed class AllocationBatch(IReadOnlyList<AllocationRequest> requests, Action<int, AllocationOutcome>? onCommitted)
{
    private readonly AllocationOutcome?[] _outcomes = new AllocationOutcome?[requests.Count];
    private readonly bool[] _reported = new bool[requests.Count];

    public IReadOnlyList<AllocationRequest> Requests => requests;

    /// <summary>
    /// The pool's activation fence every statement of the call checks (issue 47); <see langword="null"/>:
    /// none (<see cref="IWorkerStore.AllocateAsync(string, IReadOnlyList{AllocationRequest}, CancellationToken)"/>).
    /// </summary>
    public long? Fence { get; init; }

    /// <summary>Fresh skip-locked statements issued after the first.</summary>
    public int Retries { get; set; }

    /// <summary>Whether any request is decided: from then on a failure answers the rest instead of throwing.</summary>
    public bool AnyCommitted { get; private set; }

    /// <summary>Records a decided outcome (its statement committed); allocated and existing ones are reported at once.</summary>
    public void Decide(int index, AllocationOutcome outcome)
    {
        _outcomes[index] = outcome;
        AnyCommitted = true;
        if (outcome.Status is AllocationStatus.Allocated or AllocationStatus.Existing)
        {
            Report(index);
        }
    }

    /// <summary>Whether request <paramref name="index"/> is still undecided.</summary>
    public bool IsOpen(int index) => _outcomes[index] is null;

    public void DecideIfOpen(int index, AllocationOutcome outcome)
    {
        if (_outcomes[index] is null)
        {
            Decide(index, outcome);
        }
    }

    /// <summary>Decides every request still open (after a failure once something committed).</summary>
    public void DecideRest(AllocationOutcome outcome)
    {
        for (var i = 0; i < _outcomes.Length; i++)
        {
            DecideIfOpen(i, outcome);
        }
    }

    /// <summary>
    /// Requests past their deadline leave <paramref name="pending"/> answered Unavailable (nothing
    /// written for them); the rest are returned.
    /// </summary>
    public List<int> DropPastDeadline(List<int> pending, DateTimeOffset now)
    {
        var kept = new List<int>(pending.Count);
        foreach (var index in pending)
        {
            if (requests[index].Deadline is { } deadline && deadline <= now)
            {
                Decide(index, AllocationOutcome.Unavailable(new AllocationDecision(0, 0, 0, false, Retries)));
            }
            else
            {
                kept.Add(index);
            }
        }

        return kept;
    }

    /// <summary>The requests decided with <paramref name="status"/> and not yet reported.</summary>
    public List<int> Undecided(AllocationStatus status) =>
        [.. Enumerable.Range(0, _outcomes.Length).Where(i => !_reported[i] && _outcomes[i]?.Status == status)];

    /// <summary>Opens decided-but-unreported requests again, to run them once more.</summary>
    public void Reopen(IEnumerable<int> indexes)
    {
        foreach (var index in indexes)
        {
            _outcomes[index] = null;
        }
    }

    /// <summary>Reports what is left and returns every outcome in request order.</summary>
    public IReadOnlyList<AllocationOutcome> Complete()
    {
        var result = new AllocationOutcome[_outcomes.Length];
        for (var i = 0; i < _outcomes.Length; i++)
        {
            result[i] = _outcomes[i] ?? throw new InvalidOperationException($"Request {i} of the batch was never decided.");
            Report(i);
        }

        return result;
    }

    private void Report(int index)
    {
        if (!_reported[index])
        {
            _reported[index] = true;
            onCommitted?.Invoke(index, _outcomes[index]!);
        }
    }

    /// <summary>
    /// A statement of the call found <see cref="Fence"/> stale (a later activation has claimed the
    /// pool) and allocated nothing: the call answers <see langword="null"/> when nothing of it was
    /// decided, and <see cref="AllocationStatus.Unavailable"/> (nothing written) for the requests
    /// left open otherwise.
    /// </summary>
    public sealed class FenceStaleException() : Exception("A later activation of the pool's grain has claimed the pool: nothing was allocated.");
}
