namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// One statement attempt's end: its command timeout, or its caller's cancellation, as the one
/// token the store hands Npgsql, and that token is cancelled on a thread of its own.
/// </summary>
/// <remarks>
/// <para>
/// Npgsql cancels a running statement by opening a second connection to the server, sending a
/// cancel request and waiting for the server to close it, synchronously, on the thread that
/// cancelled the token (or, with the driver's own command timeout, on the thread-pool thread
/// whose read timed out). Against a server that hangs (frozen, or a black hole that still
/// accepts connections) that thread is held for up to twice the connection timeout. On the
/// shared thread pool a few such threads stalled every other database's pools for seconds, and a
/// caller that cancelled (a grain turn, a timer) waited as long (ADR 0027, ADR 0029).
/// </para>
/// <para>
/// So the store never hands Npgsql a command timeout or its caller's token: this token is
/// cancelled by a new background thread, which alone waits for the server. The statement ends
/// once Npgsql has given up on the cancel request (its <c>Cancellation Timeout</c> later), as
/// before; nobody else waits with it.
/// </para>
/// </remarks>
internal sealed class StatementDeadline : IDisposable
{
    private const int Running = 0, Cancelling = 1, Disposed = 2;

    private readonly CancellationTokenSource _source = new();
    private readonly ITimer _timer;
    private readonly CancellationTokenRegistration _caller;
    private int _state;
    private volatile bool _expired;

    /// <param name="timeout">The command timeout.</param>
    /// <param name="time">The clock of the timeout: the real one in the store, as the driver's timeout was.</param>
    /// <param name="caller">The caller's cancellation.</param>
    public StatementDeadline(TimeSpan timeout, TimeProvider time, CancellationToken caller)
    {
        _timer = time.CreateTimer(static s => ((StatementDeadline)s!).Expire(), this, timeout, Timeout.InfiniteTimeSpan);
        _caller = caller.UnsafeRegister(static s => ((StatementDeadline)s!).CancelOffThePool(), this);
    }

    /// <summary>The token for the statement's Npgsql calls.</summary>
    public CancellationToken Token => _source.Token;

    /// <summary>The command timeout passed (rather than the caller cancelling).</summary>
    public bool Expired => _expired;

    /// <summary>The statement ended: no cancel from now on (one already started runs to its end on its own thread).</summary>
    public void Dispose()
    {
        _timer.Dispose();
        _caller.Dispose();
        if (Interlocked.CompareExchange(ref _state, Disposed, Running) == Running)
        {
            _source.Dispose();
        }
    }

    private void Expire()
    {
        _expired = true;
        CancelOffThePool();
    }

    private void CancelOffThePool()
    {
        if (Interlocked.CompareExchange(ref _state, Cancelling, Running) != Running)
        {
            return;
        }

        // A thread per cancel: each may wait seconds for a hung server, and several must not
        // queue behind one another. Cancels are rare (timeouts, stops), and bounded by the
        // statements in flight (the connection pool's size).
        var thread = new Thread(static s =>
        {
            var source = (CancellationTokenSource)s!;
            try
            {
                source.Cancel();
            }
            catch (AggregateException)
            {
                // A callback failed (Npgsql's do not throw). This thread must not take the
                // process down: the statement still ends by the server's statement_timeout.
            }
            finally
            {
                source.Dispose();
            }
        })
        {
            IsBackground = true,
            Name = "Allocator statement cancel",
        };
        thread.UnsafeStart(_source);
    }
}
