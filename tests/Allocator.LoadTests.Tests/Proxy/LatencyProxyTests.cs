using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Allocator.LoadTests.Proxy;
using Allocator.Testing;

namespace Allocator.LoadTests.Tests.Proxy;

/// <summary>
/// Correctness of the latency proxy, with generous bounds: it adds the configured round trip,
/// it does not serialize connections, and it keeps every byte in order. Not performance targets.
/// </summary>
[Collection(TimingSensitive.Name)]
public sealed class LatencyProxyTests
{
    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(30);

    [Fact]
    public async Task RoundTrip_ThroughProxy_AddsTheConfiguredRttOnce()
    {
        await using var echo = new EchoServer();
        await using var proxy = LatencyProxy.Start(echo.EndPoint, TimeSpan.FromMilliseconds(100));
        using var client = await ConnectAsync(proxy.EndPoint);

        var samples = new List<double>();
        for (var i = 0; i < 10; i++)
        {
            samples.Add((await PingAsync(client, (byte)i)).TotalMilliseconds);
        }

        // Never less than the round trip (within the clock's resolution), and the quickest
        // sample close to it: the delay is added once each way, not twice. Not the median: with
        // the other test assemblies running beside this one on 2 cores, whole pings ran 10-50 ms
        // late in CI (107-157 ms for 100); how late the proxy runs under load is what the load
        // tests report as chunk lateness.
        samples.Sort();
        var seen = string.Join(", ", samples.Select(s => s.ToString("0.0")));
        samples[0].Should().BeInRange(90, 120, "the proxy adds RTT/2 each way, once; samples were {0}", seen);
        proxy.ConnectionsAccepted.Should().Be(1);
        proxy.BytesToTarget.Should().Be(10);
        proxy.BytesToClient.Should().Be(10);
    }

    [Fact]
    public async Task ConcurrentConnections_ThroughProxy_AreNotSerializedByTheDelay()
    {
        const int Connections = 20;
        const int PingsEach = 5;
        var rtt = TimeSpan.FromMilliseconds(100);
        await using var echo = new EchoServer();
        await using var proxy = LatencyProxy.Start(echo.EndPoint, rtt);
        var clients = await Task.WhenAll(Enumerable.Range(0, Connections).Select(_ => ConnectAsync(proxy.EndPoint)));
        try
        {
            using var lateness = SchedulingDelay.Start();
            var wall = Stopwatch.StartNew();
            await Task.WhenAll(clients.Select(async client =>
            {
                for (var i = 0; i < PingsEach; i++)
                {
                    await PingAsync(client, (byte)i);
                }
            })).WaitAsync(Timeout);
            wall.Stop();

            // One connection alone takes PingsEach × RTT = 500 ms; serialized they would take 10 s.
            // A second for the pings' own way, plus what the machine kept this process waiting.
            var perConnection = PingsEach * rtt;
            wall.Elapsed.Should().BeGreaterThan(perConnection * 0.9);
            wall.Elapsed.Should().BeLessThan(
                lateness.Bound(promise: perConnection, allowance: TimeSpan.FromSeconds(1), defect: perConnection * Connections),
                "connections must overlap, not queue behind each other's delay ({0})", lateness);
            proxy.ConnectionsAccepted.Should().Be(Connections);
        }
        finally
        {
            foreach (var client in clients)
            {
                client.Dispose();
            }
        }
    }

    [Fact]
    public async Task PatternedMegabyte_ThroughProxyWithJitter_ArrivesIntactAndInOrder()
    {
        const int Size = 1024 * 1024;
        var data = new byte[Size];
        for (var i = 0; i < Size; i++)
        {
            // A pattern that is not periodic in any chunk size, so a swapped chunk is detected.
            data[i] = (byte)((i * 31) ^ (i >> 8) ^ (i >> 16));
        }

        await using var echo = new EchoServer();
        await using var proxy = LatencyProxy.Start(echo.EndPoint, TimeSpan.FromMilliseconds(20), jitter: TimeSpan.FromMilliseconds(15));
        using var client = await ConnectAsync(proxy.EndPoint);

        var send = Task.Run(async () =>
        {
            var random = new Random(42);
            var offset = 0;
            while (offset < Size)
            {
                var length = Math.Min(Size - offset, random.Next(1, 20_000));
                offset += await client.SendAsync(data.AsMemory(offset, length), SocketFlags.None);
                if (random.Next(8) == 0)
                {
                    await Task.Delay(1);
                }
            }

            client.Shutdown(SocketShutdown.Send);
        });
        var received = new byte[Size];
        var total = 0;
        while (true)
        {
            var read = await client.ReceiveAsync(received.AsMemory(total, Size - total), SocketFlags.None).AsTask().WaitAsync(Timeout);
            if (read == 0)
            {
                break;
            }

            total += read;
            if (total == Size)
            {
                // Expect the echo server's half-close next.
                var end = await client.ReceiveAsync(new byte[1].AsMemory(), SocketFlags.None).AsTask().WaitAsync(Timeout);
                end.Should().Be(0);
                break;
            }
        }

        await send;
        total.Should().Be(Size);
        received.AsSpan().SequenceEqual(data).Should().BeTrue("bytes must arrive intact and in order under jitter");
        proxy.BytesToTarget.Should().Be(Size);
        proxy.BytesToClient.Should().Be(Size);
    }

    [Fact]
    public async Task Dispose_WithOpenConnections_EndsThem()
    {
        await using var echo = new EchoServer();
        var proxy = LatencyProxy.Start(echo.EndPoint, TimeSpan.FromMilliseconds(10));
        using var client = await ConnectAsync(proxy.EndPoint);
        await PingAsync(client, 1);

        await proxy.DisposeAsync().AsTask().WaitAsync(Timeout);

        proxy.ActiveConnections.Should().Be(0);
        var read = await client.ReceiveAsync(new byte[1].AsMemory(), SocketFlags.None).AsTask().WaitAsync(Timeout);
        read.Should().Be(0, "the proxy closed the client side");
    }

    private static async Task<Socket> ConnectAsync(IPEndPoint endPoint)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        await socket.ConnectAsync(endPoint);
        return socket;
    }

    private static async Task<TimeSpan> PingAsync(Socket socket, byte value)
    {
        var start = Stopwatch.GetTimestamp();
        await socket.SendAsync(new[] { value }, SocketFlags.None);
        var buffer = new byte[1];
        var read = await socket.ReceiveAsync(buffer.AsMemory(), SocketFlags.None).AsTask().WaitAsync(Timeout);
        var elapsed = Stopwatch.GetElapsedTime(start);
        read.Should().Be(1);
        buffer[0].Should().Be(value);
        return elapsed;
    }
}
