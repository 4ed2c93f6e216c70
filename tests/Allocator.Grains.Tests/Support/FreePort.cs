using System.Net;
using System.Net.Sockets;

namespace Allocator.Grains.Tests.Support;

internal static class FreePort
{
    /// <summary>A loopback port free at this moment (the OS picks it).</summary>
    public static int Next()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}
