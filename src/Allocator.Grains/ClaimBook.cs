namespace Allocator.Grains;

/// <summary>
/// Who may try to allocate for a request waiting in several pools at once (ADR 0036): one call at
/// a time holds the claim and goes to its pool's store; the others ask and wait their turn; once
/// one allocated (or the wait is over) every later ask is refused. So a caller parked in every
/// pool's queue is served by exactly one of them, the first to find room.
/// </summary>
/// <remarks>
/// <para>
/// Each call to a pool carries a ticket of its own. A call given up on (its pool answered
/// "moved", or its answer was lost with a silo that left) may still be alive where its grain now
/// lives, forwarded there: its ticket is dropped, so that it can never be granted the claim later,
/// and the request is sent again under a new ticket.
/// </para>
/// <para>
/// Single-threaded by contract: the owning grain's turns (its claim methods interleave, but
/// Orleans still runs one turn at a time). A grant is a lease number: a call gives the claim back
/// with the number it was given, so a give-back overtaken by the same call's next ask is stale
/// and changes nothing.
/// </para>
/// </remarks>
internal sealed class ClaimBook
{
    private readonly Queue<(Guid Ticket, TaskCompletionSource<long> Answer)> _asking = new();
    private readonly HashSet<Guid> _live = [];
    private bool _open;
    private Guid? _holder;
    private long _lease;

    /// <summary>Asks waiting for the claim.</summary>
    public int Asking => _asking.Count;

    /// <summary>Starts a wait across pools: tickets may now be issued.</summary>
    public void Begin()
    {
        End();
        _open = true;
    }

    /// <summary>A ticket for one call to one pool; its asks are heard until it is dropped or the wait ends.</summary>
    public Guid Issue()
    {
        var ticket = Guid.NewGuid();
        _live.Add(ticket);
        return ticket;
    }

    /// <summary>Whether <paramref name="ticket"/>'s call holds the claim now (it may be allocating).</summary>
    public bool Holds(Guid ticket) => _open && _holder == ticket;

    /// <summary>
    /// A call about to send the request to its pool's store asks for the claim: a lease number
    /// above zero when granted (at once, or when the holder gives it back), zero when refused (the
    /// wait is over, or the call was given up on).
    /// </summary>
    public Task<long> Ask(Guid ticket)
    {
        if (!_open || !_live.Contains(ticket))
        {
            return Task.FromResult(0L);
        }

        if (_holder is null || _holder == ticket)
        {
            return Task.FromResult(Grant(ticket));
        }

        var answer = new TaskCompletionSource<long>(TaskCreationOptions.RunContinuationsAsynchronously);
        _asking.Enqueue((ticket, answer));
        return answer.Task;
    }

    /// <summary>The holder tried and found no room (its request is parked again): the next call asking may try.</summary>
    public void GiveBack(Guid ticket, long lease)
    {
        if (_open && lease == _lease && _holder == ticket)
        {
            _holder = null;
            GrantNext();
        }
    }

    /// <summary>
    /// A call ended, or is given up on: its ticket is never granted again (its asks now and later
    /// are refused), and the claim passes on if it held it. The caller decides first, with
    /// <see cref="Holds"/>, whether a holder's ending leaves the outcome unknown.
    /// </summary>
    public void Drop(Guid ticket)
    {
        if (!_live.Remove(ticket) || !_open)
        {
            return;
        }

        var kept = _asking.Count;
        for (var i = 0; i < kept; i++)
        {
            var ask = _asking.Dequeue();
            if (ask.Ticket == ticket)
            {
                ask.Answer.TrySetResult(0);
            }
            else
            {
                _asking.Enqueue(ask);
            }
        }

        if (_holder == ticket)
        {
            _holder = null;
            GrantNext();
        }
    }

    /// <summary>The wait is over (allocated, out of time, or its caller left): every ask now and later is refused.</summary>
    public void End()
    {
        _open = false;
        _holder = null;
        _live.Clear();
        while (_asking.TryDequeue(out var ask))
        {
            ask.Answer.TrySetResult(0);
        }
    }

    private long Grant(Guid ticket)
    {
        _holder = ticket;
        return ++_lease;
    }

    private void GrantNext()
    {
        if (_asking.TryDequeue(out var next))
        {
            next.Answer.TrySetResult(Grant(next.Ticket));
        }
    }
}
