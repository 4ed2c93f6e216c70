using System.Net;
using System.Net.Sockets;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;

namespace Allocator.Host.Cluster;

/// <summary>
/// Silo-to-silo connections that leave from one local address (<c>Allocator:Cluster:BindOutgoingToAdvertisedAddress</c>):
/// Orleans connects without binding, so the operating system picks the source address for the
/// route (on loopback, 127.0.0.1 for every silo).
/// </summary>
internal sealed class OutgoingSiloConnections(IPAddress local, SocketConnectionContextFactory contexts) : IConnectionFactory
{
    public async ValueTask<ConnectionContext> ConnectAsync(EndPoint endpoint, CancellationToken cancellationToken = default)
    {
        var socket = new Socket(endpoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            socket.Bind(new IPEndPoint(local, 0));
            await socket.ConnectAsync(endpoint, cancellationToken);
            return contexts.Create(socket);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Replaces the factory Orleans opens silo connections with (its one keyed
    /// <see cref="IConnectionFactory"/> in a silo; the key is Orleans' own, taken from its registration).
    /// </summary>
    /// <exception cref="InvalidOperationException">Orleans no longer registers exactly one: the option cannot be honoured.</exception>
    public static void Use(IServiceCollection services, IPAddress local)
    {
        var registered = services.Where(d => d.ServiceType == typeof(IConnectionFactory) && d.IsKeyedService).ToList();
        if (registered.Count != 1)
        {
            throw new InvalidOperationException($"Allocator:Cluster:BindOutgoingToAdvertisedAddress: expected Orleans to register one silo connection factory, found {registered.Count}.");
        }

        services.AddKeyedSingleton<IConnectionFactory>(registered[0].ServiceKey, (sp, _) => new OutgoingSiloConnections(
            local,
            new SocketConnectionContextFactory(new SocketConnectionFactoryOptions(), sp.GetRequiredService<ILogger<OutgoingSiloConnections>>())));
    }
}
