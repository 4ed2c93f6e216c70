using System.Net;
using System.Net.Sockets;

namespace Allocator.LoadTests.Tests.Proxy;

/// <summary>A loopback TCP server that writes back whatever it reads, for proxy tests.</summary>
internal sealed class EchoServer : IAsyncDisposable
{
    private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
    private readonly CancellationTokenSource _stop = new();
    private readonly List<Task> _connections = [];
    private readonly Task _accept;

    public EchoServer()
    {
        _listener.Start();
        EndPoint = (IPEndPoint)_listener.LocalEndpoint;
        _accept = AcceptAsync();
    }

    public IPEndPoint EndPoint { get; }

    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync();
        _listener.Stop();
        await _accept;
        Task[] connections;
        lock (_connections)
        {
            connections = [.. _connections];
        }

        await Task.WhenAll(connections);
        _stop.Dispose();
    }

    private async Task AcceptAsync()
    {
        while (!_stop.IsCancellationRequested)
        {
            Socket socket;
            try
            {
                socket = await _listener.AcceptSocketAsync(_stop.Token);
            }
            catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
            {
                return;
            }

            lock (_connections)
            {
                _connections.Add(EchoAsync(socket));
            }
        }
    }

    private async Task EchoAsync(Socket socket)
    {
        using var _ = socket;
        socket.NoDelay = true;
        var buffer = new byte[16 * 1024];
        try
        {
            while (true)
            {
                var read = await socket.ReceiveAsync(buffer, SocketFlags.None, _stop.Token);
                if (read == 0)
                {
                    socket.Shutdown(SocketShutdown.Send);
                    return;
                }

                var sent = 0;
                while (sent < read)
                {
                    sent += await socket.SendAsync(buffer.AsMemory(sent, read - sent), SocketFlags.None, _stop.Token);
                }
            }
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
        }
    }
}
