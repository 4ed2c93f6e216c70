using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Threading.Channels;
using Allocator.Grains;

namespace Allocator.LoadTests.Proxy;

/// <summary>
/// A TCP proxy on 127.0.0.1 that adds network latency between a client (the service) and a
/// target (PostgreSQL): every chunk is delayed by half the round trip in each direction.
/// </summary>
/// <remarks>
/// Each direction of each connection is a reader and a writer joined by a queue. The reader
/// stamps a chunk with its due time (arrival + RTT/2, plus jitter) and reads on at once; the
/// writer waits until the head chunk is due and writes it. The waits are timed by the grains'
/// <see cref="ShortDelays"/> (compiled in): one dedicated thread blocked in
/// <see cref="Monitor.Wait(object, int)"/> for whole milliseconds and in <c>usleep</c> for the
/// rest, because <c>Task.Delay</c> fired 2.8 ms late at the median and 10 ms at the p99 for a
/// 45 ms wait here (the proxy then added 102–110 ms for a configured 100 ms round trip), and
/// spinning out the last stretch burned a core the service and the database needed. Chunks in flight overlap, so the
/// proxy adds latency without limiting throughput, and the queue keeps bytes in order. With
/// jitter a chunk is never due before the previous one, so jitter cannot reorder bytes.
/// </remarks>
internal sealed class LatencyProxy : IAsyncDisposable
{
    private const int ChunkSize = 64 * 1024;

    private readonly Socket _listener;
    private readonly IPEndPoint _target;
    private readonly ShortDelays _scheduler = new(TimeProvider.System);
    private readonly long _halfRttTicks;
    private readonly long _jitterTicks;
    private readonly CancellationTokenSource _stopping = new();
    private readonly ConcurrentDictionary<long, Task> _connections = new();
    private readonly Task _acceptLoop;
    private long _connectionCount;
    private long _bytesToTarget;
    private long _bytesToClient;

    // Lateness of chunks handed on after their due time, in 0.1 ms buckets; the last one holds
    // everything from 100 ms on.
    private readonly long[] _lateness = new long[1001];
    private int _activeConnections;

    private LatencyProxy(IPEndPoint target, TimeSpan rtt, TimeSpan jitter)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(rtt, TimeSpan.Zero);
        ArgumentOutOfRangeException.ThrowIfLessThan(jitter, TimeSpan.Zero);
        _target = target;
        Rtt = rtt;
        Jitter = jitter;
        _halfRttTicks = (long)(rtt.TotalSeconds / 2 * Stopwatch.Frequency);
        _jitterTicks = (long)(jitter.TotalSeconds * Stopwatch.Frequency);
        _listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        _listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        _listener.Listen(512);
        EndPoint = (IPEndPoint)_listener.LocalEndPoint!;
        _acceptLoop = AcceptLoopAsync();
    }

    /// <summary>Where clients connect: 127.0.0.1 and an ephemeral port.</summary>
    public IPEndPoint EndPoint { get; }

    /// <summary>The round trip added to every request/answer exchange.</summary>
    public TimeSpan Rtt { get; }

    /// <summary>Up to this much is added to or taken from each chunk's one-way delay (order is kept).</summary>
    public TimeSpan Jitter { get; }

    public long ConnectionsAccepted => Interlocked.Read(ref _connectionCount);

    public int ActiveConnections => Volatile.Read(ref _activeConnections);

    public long BytesToTarget => Interlocked.Read(ref _bytesToTarget);

    public long BytesToClient => Interlocked.Read(ref _bytesToClient);

    /// <summary>
    /// How late chunks were handed on, past their due time (ms, 0.1 ms resolution): the error the
    /// proxy adds to the configured latency on the sending side, timer and thread-pool delays
    /// included. <paramref name="quantile"/> in [0, 1]; NaN before the first chunk.
    /// </summary>
    public double LatenessMs(double quantile)
    {
        var counts = new long[_lateness.Length];
        for (var i = 0; i < counts.Length; i++)
        {
            counts[i] = Interlocked.Read(ref _lateness[i]);
        }

        var total = counts.Sum();
        if (total == 0)
        {
            return double.NaN;
        }

        var rank = Math.Max(1, (long)Math.Ceiling(quantile * total));
        long seen = 0;
        for (var i = 0; i < counts.Length; i++)
        {
            seen += counts[i];
            if (seen >= rank)
            {
                return i / 10.0;
            }
        }

        return (counts.Length - 1) / 10.0;
    }

    /// <summary>Starts a proxy to <paramref name="target"/> on an ephemeral loopback port.</summary>
    public static LatencyProxy Start(IPEndPoint target, TimeSpan rtt, TimeSpan jitter = default) =>
        new(target, rtt, jitter);

    public override string ToString() =>
        $"latency proxy {EndPoint} -> {_target}, RTT {Rtt.TotalMilliseconds:0.#} ms" + (Jitter > TimeSpan.Zero ? $" ± {Jitter.TotalMilliseconds:0.#} ms" : "");

    public async ValueTask DisposeAsync()
    {
        await _stopping.CancelAsync();
        _listener.Dispose();
        await _acceptLoop;
        await Task.WhenAll(_connections.Values);
        _scheduler.Dispose();
        _stopping.Dispose();
    }

    private async Task AcceptLoopAsync()
    {
        var token = _stopping.Token;
        while (!token.IsCancellationRequested)
        {
            Socket client;
            try
            {
                client = await _listener.AcceptAsync(token);
            }
            catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or SocketException)
            {
                return;
            }

            var id = Interlocked.Increment(ref _connectionCount);
            Interlocked.Increment(ref _activeConnections);
            var task = HandleConnectionAsync(client, token);
            _connections[id] = task;
            _ = task.ContinueWith(_ => _connections.TryRemove(id, out var _), TaskScheduler.Default);
        }
    }

    private async Task HandleConnectionAsync(Socket client, CancellationToken stopping)
    {
        client.NoDelay = true;
        using var server = new Socket(_target.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        using var connection = CancellationTokenSource.CreateLinkedTokenSource(stopping);
        try
        {
            await server.ConnectAsync(_target, connection.Token);
            var up = PumpAsync(client, server, isUpstream: true, connection);
            var down = PumpAsync(server, client, isUpstream: false, connection);
            await Task.WhenAll(up, down);
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // The target refused, a side reset, or the proxy stops: the connection ends.
        }
        finally
        {
            client.Dispose();
            Interlocked.Decrement(ref _activeConnections);
        }
    }

    /// <summary>One direction: a reader stamping chunks and a writer releasing them when due.</summary>
    private async Task PumpAsync(Socket from, Socket to, bool isUpstream, CancellationTokenSource connection)
    {
        var queue = Channel.CreateUnbounded<Chunk>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true });
        var reader = ReadAsync(from, queue.Writer, connection);
        var writer = WriteAsync(to, queue.Reader, isUpstream, connection);
        await Task.WhenAll(reader, writer);
    }

    private async Task ReadAsync(Socket from, ChannelWriter<Chunk> queue, CancellationTokenSource connection)
    {
        var token = connection.Token;
        long previousDue = 0;
        try
        {
            while (true)
            {
                var buffer = ArrayPool<byte>.Shared.Rent(ChunkSize);
                int read;
                try
                {
                    read = await from.ReceiveAsync(buffer.AsMemory(0, ChunkSize), SocketFlags.None, token);
                }
                catch
                {
                    ArrayPool<byte>.Shared.Return(buffer);
                    throw;
                }

                var due = NextDue(Stopwatch.GetTimestamp(), ref previousDue);
                if (read == 0)
                {
                    ArrayPool<byte>.Shared.Return(buffer);
                    queue.TryWrite(new Chunk(null, 0, due));
                    return;
                }

                queue.TryWrite(new Chunk(buffer, read, due));
            }
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            // A reset on one side ends both directions at once, as a real network would.
            await connection.CancelAsync();
        }
        finally
        {
            queue.TryComplete();
        }
    }

    /// <summary>Completes at <paramref name="due"/> (a <see cref="Stopwatch"/> timestamp); a canceled connection stops waiting at once.</summary>
    private Task WaitUntilAsync(long due, CancellationToken cancellationToken)
    {
        var wait = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _scheduler.ScheduleAt(due, () => wait.TrySetResult());
        return wait.Task.WaitAsync(cancellationToken);
    }

    private async Task WriteAsync(Socket to, ChannelReader<Chunk> queue, bool isUpstream, CancellationTokenSource connection)
    {
        var token = connection.Token;
        try
        {
            await foreach (var chunk in queue.ReadAllAsync(token))
            {
                await WaitUntilAsync(chunk.Due, token);
                var lateMs = (Stopwatch.GetTimestamp() - chunk.Due) * 1000.0 / Stopwatch.Frequency;
                Interlocked.Increment(ref _lateness[Math.Clamp((int)(lateMs * 10), 0, _lateness.Length - 1)]);

                if (chunk.Buffer is null)
                {
                    // End of stream from the sender: pass the half-close on, delayed like data.
                    to.Shutdown(SocketShutdown.Send);
                    return;
                }

                // Counted when handed on, so a reader that has the bytes also sees them counted.
                Interlocked.Add(ref isUpstream ? ref _bytesToTarget : ref _bytesToClient, chunk.Length);
                try
                {
                    var sent = 0;
                    while (sent < chunk.Length)
                    {
                        sent += await to.SendAsync(chunk.Buffer.AsMemory(sent, chunk.Length - sent), SocketFlags.None, token);
                    }
                }
                finally
                {
                    ArrayPool<byte>.Shared.Return(chunk.Buffer);
                }
            }
        }
        catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
        {
            await connection.CancelAsync();
        }
        finally
        {
            // Chunks still queued when the connection dies go back to the pool.
            while (queue.TryRead(out var left))
            {
                if (left.Buffer is not null)
                {
                    ArrayPool<byte>.Shared.Return(left.Buffer);
                }
            }
        }
    }

    /// <summary>Due time of a chunk read now: arrival + RTT/2 ± jitter, never before the previous chunk.</summary>
    private long NextDue(long arrival, ref long previousDue)
    {
        var due = arrival + _halfRttTicks;
        if (_jitterTicks > 0)
        {
            due += Random.Shared.NextInt64(-_jitterTicks, _jitterTicks + 1);
        }

        due = Math.Max(due, previousDue);
        previousDue = due;
        return due;
    }

    private readonly record struct Chunk(byte[]? Buffer, int Length, long Due);
}
