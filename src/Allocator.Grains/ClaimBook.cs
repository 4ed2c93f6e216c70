namespace Allocator.Grains;

/// <summary>
/// Who may try to allocate for a request waiting in several pools at once (ADR 0036): one pool
/// at a time holds the claim and goes to its store; the others ask and wait their turn; once one
/// allocated (or the wait is over) every later ask is refused. So a caller parked in every pool's
/// queue is served by exactly one of them, the first to find room.
/// </summary>
/// <remarks>
/// Single-threaded by contract: the owning grain's turns (its claim methods interleave, but
/// Orleans still runs one turn at a time). A grant is a lease number: a pool gives the claim back
/// with the number it was given, so a give-back that arrives after the same pool asked again (two
/// messages overtaking each other) is stale and changes nothing.
/// </remarks>
internal sealed class ClaimBook
{
    private readonly Queue<(string Pool, TaskCompletionSource<long> Answer)> _asking = new();
    private Guid _attempt;
    private bool _open;
    private string? _holder;
    private long _lease;

    /// <summary>The pool holding the claim now, if any.</summary>
    public string? Holder => _open ? _holder : null;

    /// <summary>Asks waiting for the claim.</summary>
    public int Asking => _asking.Count;

    /// <summary>Starts a wait across pools: a new attempt id, which every ask and give-back names.</summary>
    public Guid Begin()
    {
        End();
        _attempt = Guid.NewGuid();
        _open = true;
        return _attempt;
    }

    /// <summary>
    /// A pool about to send the request to its store asks for the claim: a lease number above zero
    /// when granted (at once, or when the holder gives it back), zero when refused (the attempt is
    /// over: allocated elsewhere, or no longer waiting).
    /// </summary>
    public Task<long> Ask(string pool, Guid attempt)
    {
        if (!_open || attempt != _attempt)
        {
            return Task.FromResult(0L);
        }

        if (_holder is null || string.Equals(_holder, pool, StringComparison.Ordinal))
        {
            return Task.FromResult(Grant(pool));
        }

        var answer = new TaskCompletionSource<long>(TaskCreationOptions.RunContinuationsAsynchronously);
        _asking.Enqueue((pool, answer));
        return answer.Task;
    }

    /// <summary>The holder tried and found no room (its request is parked again): the next pool asking may try.</summary>
    public void GiveBack(string pool, Guid attempt, long lease)
    {
        if (_open && attempt == _attempt && lease == _lease && string.Equals(_holder, pool, StringComparison.Ordinal))
        {
            _holder = null;
            GrantNext();
        }
    }

    /// <summary>
    /// A pool's call ended without an allocation that is known to be nothing (no capacity, or
    /// nothing written): it gives back the claim if it held it, and its asks are refused.
    /// </summary>
    public void Left(string pool)
    {
        if (!_open)
        {
            return;
        }

        var kept = _asking.Count;
        for (var i = 0; i < kept; i++)
        {
            var ask = _asking.Dequeue();
            if (string.Equals(ask.Pool, pool, StringComparison.Ordinal))
            {
                ask.Answer.TrySetResult(0);
            }
            else
            {
                _asking.Enqueue(ask);
            }
        }

        if (string.Equals(_holder, pool, StringComparison.Ordinal))
        {
            _holder = null;
            GrantNext();
        }
    }

    /// <summary>The attempt is over (allocated, out of time, or its caller left): every ask now and later is refused.</summary>
    public void End()
    {
        _open = false;
        _holder = null;
        while (_asking.TryDequeue(out var ask))
        {
            ask.Answer.TrySetResult(0);
        }
    }

    private long Grant(string pool)
    {
        _holder = pool;
        return ++_lease;
    }

    private void GrantNext()
    {
        if (_asking.TryDequeue(out var next))
        {
            next.Answer.TrySetResult(Grant(next.Pool));
        }
    }
}
