using System.Net;
using System.Net.Sockets;

namespace Allocator.Networking;

/// <summary>
/// TCP ports that are free right now, for a silo or an HTTP listener that must be told its port
/// before it binds (Orleans' silo and gateway ports, a child process's <c>--urls</c>).
/// </summary>
/// <remarks>
/// One source file compiled into each project that needs it (linked from <c>src/Shared</c>,
/// internal to each). Ports are drawn below the kernel's ephemeral range (32768 and up on Linux),
/// so that no outgoing connection of another process is given the port between this check and
/// the owner's bind; a port the OS picks itself (bind to 0) comes from that very range.
/// </remarks>
internal static class FreePort
{
    private const int First = 20_000;
    private const int Last = 32_000;

    // The ports handed out lately. A port is free until its owner binds it, and a second caller
    // in between found it free too: a service and the Aspire dashboard it exported to were once
    // given the same port ("address already in use"). None is handed out twice while remembered.
    private const int Remembered = 4_000;
    private static readonly HashSet<int> HandedOut = [];
    private static readonly Queue<int> HandedOutInOrder = new();

    /// <summary>A port free on <paramref name="address"/> (default loopback) at this moment.</summary>
    public static int Next(IPAddress? address = null) => Range(1, address);

    /// <summary>The first of <paramref name="count"/> consecutive ports that are free on <paramref name="address"/> (default loopback) now.</summary>
    public static int Range(int count, IPAddress? address = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(count, 1);
        address ??= IPAddress.Loopback;
        for (var attempt = 0; attempt < 200; attempt++)
        {
            var first = Random.Shared.Next(First, Last - count + 1);
            lock (HandedOut)
            {
                if (Enumerable.Range(first, count).Any(HandedOut.Contains) || !Enumerable.Range(first, count).All(port => IsFree(address, port)))
                {
                    continue;
                }

                foreach (var port in Enumerable.Range(first, count))
                {
                    HandedOut.Add(port);
                    HandedOutInOrder.Enqueue(port);
                    if (HandedOutInOrder.Count > Remembered)
                    {
                        HandedOut.Remove(HandedOutInOrder.Dequeue());
                    }
                }

                return first;
            }
        }

        throw new InvalidOperationException($"No {count} consecutive free port(s) found between {First} and {Last} on {address}.");
    }

    private static bool IsFree(IPAddress address, int port)
    {
        try
        {
            using var listener = new TcpListener(address, port);
            listener.Start();
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }
}
