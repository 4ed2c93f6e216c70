using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;

namespace Allocator.Host.Lifecycle;

/// <summary>
/// Kestrel's listening sockets, so that a stopping instance can stop taking new connections a
/// moment before Kestrel closes them. Closing a listening socket makes the kernel reset every
/// connection it had completed but Kestrel had not yet accepted; their callers cannot tell
/// whether their request ran. Dropping new connection attempts first (a socket filter: the
/// caller's connect waits, then is refused once the listener is gone) lets Kestrel accept and
/// serve what is queued, so nothing is reset.
/// </summary>
internal sealed class ListenSockets
{
    // Linux: setsockopt(SOL_SOCKET, SO_ATTACH_FILTER) with a classic BPF program.
    private const int SolSocket = 1;
    private const int SoAttachFilter = 26;

    private readonly ConcurrentDictionary<Socket, bool> _sockets = new();

    /// <summary>For <see cref="SocketTransportOptions.CreateBoundListenSocket"/>: Kestrel's own socket, remembered.</summary>
    public Socket Create(EndPoint endpoint)
    {
        var socket = SocketTransportOptions.CreateDefaultBoundListenSocket(endpoint);
        _sockets[socket] = true;
        return socket;
    }

    /// <summary>
    /// From now on new connection attempts (TCP SYNs) to the listening sockets are dropped;
    /// connections already completed stay in the queue for Kestrel to accept. Only on Linux,
    /// for TCP sockets; elsewhere nothing changes.
    /// </summary>
    /// <returns>How many sockets now drop new connections.</returns>
    public int RefuseNewConnections()
    {
        if (!OperatingSystem.IsLinux())
        {
            return 0;
        }

        var refused = 0;
        foreach (var socket in _sockets.Keys)
        {
            if (socket.ProtocolType == ProtocolType.Tcp && TryAttachDropAll(socket))
            {
                refused++;
            }
        }

        return refused;
    }

    private static bool TryAttachDropAll(Socket socket)
    {
        // One instruction, "return 0": keep no byte of any packet (struct sock_filter, 8 bytes).
        var program = Marshal.AllocHGlobal(8);
        try
        {
            Marshal.WriteInt16(program, 0, 0x06); // BPF_RET | BPF_K
            Marshal.WriteByte(program, 2, 0);
            Marshal.WriteByte(program, 3, 0);
            Marshal.WriteInt32(program, 4, 0);

            // struct sock_fprog: the instruction count, then (aligned) a pointer to the program.
            Span<byte> fprog = stackalloc byte[2 * IntPtr.Size];
            fprog.Clear();
            MemoryMarshal.Write(fprog, (ushort)1);
            if (IntPtr.Size == 8)
            {
                MemoryMarshal.Write(fprog[8..], program.ToInt64());
            }
            else
            {
                MemoryMarshal.Write(fprog[4..], program.ToInt32());
            }

            // The kernel copies the program; the memory can go right after.
            socket.SetRawSocketOption(SolSocket, SoAttachFilter, fprog);
            return true;
        }
        catch (Exception ex) when (ex is SocketException or ObjectDisposedException or PlatformNotSupportedException)
        {
            return false;
        }
        finally
        {
            Marshal.FreeHGlobal(program);
        }
    }
}
