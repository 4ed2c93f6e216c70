using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;

namespace Allocator.Testing;

/// <summary>
/// A TCP proxy on 127.0.0.1 that can black-hole its traffic: while partitioned, nothing is
/// forwarded either way and new connections are accepted but not passed on, yet no connection is
/// closed or reset, as when a network path silently drops packets (a half-open connection).
/// Resuming forwards what was held back. To a client this is also a server that hangs (a frozen
/// PostgreSQL: the kernel still accepts, nothing answers). One copy, compiled into the fault
/// scenarios and the PostgreSQL store's tests.
/// </summary>
internal sealed class PartitionProxy : IAsyncDisposable
{
    private readonly Socket _listener;
    private readonly IPEndPoint _target;
    private readonly CancellationTokenSource _stopping = new();
    private readonly ConcurrentDictionary<Task, byte> _connections = new();
    private readonly Task _acceptLoop;
    private volatile TaskCompletionSource _open = Opened();
    private int _accepted;

    private PartitionProxy(IPEndPoint target)
    {
        _target = target;
        _listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        _listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        _listener.Listen(512);
        EndPoint = (IPEndPoint)_listener.LocalEndPoint!;
        _acceptLoop = AcceptLoopAsync();
    }

    public IPEndPoint EndPoint { get; }

    public bool Partitioned => !_open.Task.IsCompleted;

    /// <summary>Connections accepted so far, during a partition too (a driver's cancel request opens one of its own).</summary>
    public int Accepted => Volatile.Read(ref _accepted);

    public static PartitionProxy Start(IPEndPoint target) => new(target);

    /// <summary>From now on nothing gets through, in either direction.</summary>
    public void Partition()
    {
        if (!Partitioned)
        {
            _open = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
    }

    /// <summary>Traffic flows again, starting with what was held back.</summary>
    public void Heal() => _open.TrySetResult();

    public async ValueTask DisposeAsync()
    {
        Heal();
        await _stopping.CancelAsync();
        _listener.Dispose();
        await _acceptLoop;
        await Task.WhenAll(_connections.Keys);
        _stopping.Dispose();
    }

    private static TaskCompletionSource Opened()
    {
        var open = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        open.SetResult();
        return open;
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
        try
        {
            await WaitOpenAsync(); // a connection made during a partition gets no further
            await upstream.ConnectAsync(_target, _stopping.Token);
            using var done = CancellationTokenSource.CreateLinkedTokenSource(_stopping.Token);
            var up = PumpAsync(client, upstream, done.Token);
            var down = PumpAsync(upstream, client, done.Token);
            await Task.WhenAny(up, down);
            await done.CancelAsync();
            await Task.WhenAll(up, down);
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // Stopping, or the target refused.
        }
    }

    private async Task PumpAsync(Socket from, Socket to, CancellationToken cancellationToken)
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

                await WaitOpenAsync().WaitAsync(cancellationToken);
                await to.SendAsync(buffer.AsMemory(0, read), SocketFlags.None, cancellationToken);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // The other side closed, or stopping.
        }
    }

    private Task WaitOpenAsync() => _open.Task;
}
