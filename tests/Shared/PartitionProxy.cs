using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;

namespace Allocator.Testing;

/// <summary>
/// A TCP proxy on 127.0.0.1 that can black-hole its traffic: while partitioned, nothing is
/// forwarded either way and new connections are accepted but not passed on, yet no connection is
/// closed or reset, as when a network path silently drops packets (a half-open connection).
/// Resuming forwards what was held back. To a client this is also a server that hangs (a frozen
/// PostgreSQL: the kernel still accepts, nothing answers). A partition may hold only the
/// connections from one address (a silo cut off from the others: its own outgoing connections
/// leave from its address). One copy, compiled into the fault scenarios and the PostgreSQL store's tests.
/// </summary>
internal sealed class PartitionProxy : IAsyncDisposable
{
    private readonly Socket _listener;
    private volatile IPEndPoint _target;
    private readonly CancellationTokenSource _stopping = new();
    private readonly ConcurrentDictionary<Task, byte> _connections = new();
    private readonly Task _acceptLoop;
    private volatile Gate _gate = Gate.Open;
    private int _accepted;

    private PartitionProxy(IPEndPoint target, IPEndPoint listenAt)
    {
        _target = target;
        _listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        _listener.Bind(listenAt);
        _listener.Listen(512);
        EndPoint = (IPEndPoint)_listener.LocalEndPoint!;
        _acceptLoop = AcceptLoopAsync();
    }

    public IPEndPoint EndPoint { get; }

    public bool Partitioned => !_gate.Opened.Task.IsCompleted;

    /// <summary>Where new connections are passed on to (a target that moved to another port).</summary>
    public IPEndPoint Target
    {
        get => _target;
        set => _target = value;
    }

    /// <summary>Connections accepted so far, during a partition too (a driver's cancel request opens one of its own).</summary>
    public int Accepted => Volatile.Read(ref _accepted);

    /// <summary>A proxy to <paramref name="target"/>, listening at <paramref name="listenAt"/> (default: a free port on 127.0.0.1).</summary>
    public static PartitionProxy Start(IPEndPoint target, IPEndPoint? listenAt = null) => new(target, listenAt ?? new IPEndPoint(IPAddress.Loopback, 0));

    /// <summary>From now on nothing gets through, in either direction.</summary>
    public void Partition() => Partition(static _ => true);

    /// <summary>From now on nothing gets through on connections made from <paramref name="client"/>, in either direction.</summary>
    public void Partition(IPAddress client) => Partition(a => a.Equals(client));

    /// <summary>Traffic flows again, starting with what was held back.</summary>
    public void Heal() => _gate.Opened.TrySetResult();

    public async ValueTask DisposeAsync()
    {
        Heal();
        await _stopping.CancelAsync();
        _listener.Dispose();
        await _acceptLoop;
        await Task.WhenAll(_connections.Keys);
        _stopping.Dispose();
    }

    private void Partition(Func<IPAddress, bool> holds)
    {
        if (!Partitioned)
        {
            _gate = new Gate(holds, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));
        }
    }

    private async Task AcceptLoopAsync()
    {
        while (!_stopping.IsCancellationRequested)
        {
            Socket client;
            try
            {
                client = await _listener.AcceptAsync(_stopping.Token);
            }
            catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or SocketException)
            {
                return;
            }

            Interlocked.Increment(ref _accepted);
            var connection = HandleAsync(client);
            _connections[connection] = 0;
            _ = connection.ContinueWith(t => _connections.TryRemove(t, out _), TaskScheduler.Default);
        }
    }

    private async Task HandleAsync(Socket client)
    {
        using var _ = client;
        using var upstream = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        var from = ((IPEndPoint)client.RemoteEndPoint!).Address;
        try
        {
            await WaitOpenAsync(from); // a connection made during a partition gets no further
            await upstream.ConnectAsync(_target, _stopping.Token);
            using var done = CancellationTokenSource.CreateLinkedTokenSource(_stopping.Token);
            var up = PumpAsync(client, upstream, from, done.Token);
            var down = PumpAsync(upstream, client, from, done.Token);
            await Task.WhenAny(up, down);
            await done.CancelAsync();
            await Task.WhenAll(up, down);
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // Stopping, or the target refused.
        }
    }

    private async Task PumpAsync(Socket from, Socket to, IPAddress client, CancellationToken cancellationToken)
    {
        var buffer = new byte[64 * 1024];
        try
        {
            while (true)
            {
                var read = await from.ReceiveAsync(buffer, SocketFlags.None, cancellationToken);
                if (read == 0)
                {
                    to.Shutdown(SocketShutdown.Send);
                    return;
                }

                await WaitOpenAsync(client).WaitAsync(cancellationToken);
                await to.SendAsync(buffer.AsMemory(0, read), SocketFlags.None, cancellationToken);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // The other side closed, or stopping.
        }
    }

    private Task WaitOpenAsync(IPAddress client)
    {
        var gate = _gate;
        return gate.Holds(client) ? gate.Opened.Task : Task.CompletedTask;
    }

    /// <summary>Which connections a partition holds (by their client's address), and the task that completes when it heals.</summary>
    private sealed record Gate(Func<IPAddress, bool> Holds, TaskCompletionSource Opened)
    {
        public static Gate Open { get; } = CreateOpen();

        private static Gate CreateOpen()
        {
            var opened = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            opened.SetResult();
            return new Gate(static _ => false, opened);
        }
    }
}
