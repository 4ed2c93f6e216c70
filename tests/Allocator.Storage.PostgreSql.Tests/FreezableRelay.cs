using System.Net;
using System.Net.Sockets;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// A loopback relay in front of PostgreSQL that can be frozen, to look like a server that hangs
/// (the db-frozen scenario's SIGSTOP): connections stay open and new ones are accepted, as the
/// kernel does for a stopped server, but not a byte passes either way until it is thawed.
/// </summary>
internal sealed class FreezableRelay : IAsyncDisposable
{
    private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
    private readonly CancellationTokenSource _stop = new();
    private readonly List<Task> _pipes = [];
    private readonly string _host;
    private readonly int _port;
    private readonly Task _accepting;
    private TaskCompletionSource _thawed = Thawed();
    private int _accepted;

    public FreezableRelay(string host, int port)
    {
        _host = host;
        _port = port;
        _listener.Start();
        _accepting = AcceptAsync();
    }

    public int Port => ((IPEndPoint)_listener.LocalEndpoint).Port;

    /// <summary>Connections accepted so far (a driver's cancel request opens one of its own).</summary>
    public int Accepted => Volatile.Read(ref _accepted);

    /// <summary>The connection string <paramref name="connectionString"/> pointed at this relay.</summary>
    public string Through(string connectionString) =>
        new Npgsql.NpgsqlConnectionStringBuilder(connectionString) { Host = "127.0.0.1", Port = Port }.ConnectionString;

    public void Freeze() => Interlocked.Exchange(ref _thawed, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));

    public void Thaw() => _thawed.TrySetResult();

    public async ValueTask DisposeAsync()
    {
        Thaw();
        await _stop.CancelAsync();
        _listener.Stop();
        await _accepting.ContinueWith(_ => { }, TaskScheduler.Default);
        Task[] pipes;
        lock (_pipes)
        {
            pipes = [.. _pipes];
        }

        await Task.WhenAll(pipes.Select(p => p.ContinueWith(_ => { }, TaskScheduler.Default)));
        _stop.Dispose();
    }

    private static TaskCompletionSource Thawed()
    {
        var thawed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        thawed.SetResult();
        return thawed;
    }

    private async Task AcceptAsync()
    {
        while (!_stop.IsCancellationRequested)
        {
            var client = await _listener.AcceptTcpClientAsync(_stop.Token);
            Interlocked.Increment(ref _accepted);
            lock (_pipes)
            {
                _pipes.Add(Task.Run(() => RelayAsync(client), CancellationToken.None));
            }
        }
    }

    private async Task RelayAsync(TcpClient client)
    {
        using (client)
        using (var server = new TcpClient())
        {
            try
            {
                await _thawed.Task.WaitAsync(_stop.Token);
                await server.ConnectAsync(_host, _port, _stop.Token);
                using var pipe = CancellationTokenSource.CreateLinkedTokenSource(_stop.Token);
                var up = CopyAsync(client.GetStream(), server.GetStream(), pipe.Token);
                var down = CopyAsync(server.GetStream(), client.GetStream(), pipe.Token);
                await Task.WhenAny(up, down);
                await pipe.CancelAsync();
                await Task.WhenAll(up, down).ContinueWith(_ => { }, TaskScheduler.Default);
            }
            catch (Exception ex) when (ex is OperationCanceledException or IOException or SocketException)
            {
                // Stopped, or one side went away.
            }
        }
    }

    /// <summary>Copies until either side closes; a chunk read while frozen is held until thawed.</summary>
    private async Task CopyAsync(Stream from, Stream to, CancellationToken cancellationToken)
    {
        var buffer = new byte[16 * 1024];
        int read;
        while ((read = await from.ReadAsync(buffer, cancellationToken)) > 0)
        {
            await _thawed.Task.WaitAsync(cancellationToken);
            await to.WriteAsync(buffer.AsMemory(0, read), cancellationToken);
        }
    }
}
