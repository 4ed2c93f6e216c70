using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Security.Cryptography.X509Certificates;

namespace Allocator.Host.Tests.Tls;

/// <summary>A raw TLS client of a silo port, presenting a given certificate or none, that trusts any server.</summary>
internal static class SiloPortProbe
{
    /// <param name="Presented">The certificate the silo presented, if the handshake got that far.</param>
    /// <param name="Served">
    /// True when the silo kept the connection open after the handshake (it waits for an Orleans
    /// client's first message); false when it closed or failed it.
    /// </param>
    public sealed record Result(X509Certificate2? Presented, bool Served);

    public static async Task<Result> ConnectAsync(int siloPort, X509Certificate2? clientCertificate = null)
    {
        using var tcp = new TcpClient();
        await tcp.ConnectAsync(IPAddress.Loopback, siloPort);
        X509Certificate2? presented = null;
        await using var tls = new SslStream(tcp.GetStream(), leaveInnerStreamOpen: false, (_, certificate, _, _) =>
        {
            presented = certificate is null ? null : X509CertificateLoader.LoadCertificate(certificate.GetRawCertData());
            return true;
        });
        try
        {
            await tls.AuthenticateAsClientAsync(new SslClientAuthenticationOptions
            {
                TargetHost = "silo",
                ClientCertificates = clientCertificate is null ? null : [clientCertificate],
            });

            // TLS 1.3: the client's handshake ends before the server has judged the client's
            // certificate; its verdict arrives as an alert or a closed connection.
            using var quiet = new CancellationTokenSource(TimeSpan.FromSeconds(3));
            var read = await tls.ReadAsync(new byte[1], quiet.Token);
            return new Result(presented, Served: read > 0);
        }
        catch (OperationCanceledException)
        {
            return new Result(presented, Served: true);
        }
        catch (Exception ex) when (ex is AuthenticationException or IOException)
        {
            return new Result(presented, Served: false);
        }
    }
}
