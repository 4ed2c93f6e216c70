using System.Net;
using System.Net.Security;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using Allocator.Host.Options;
using Microsoft.Extensions.Logging.Abstractions;
using Orleans.Connections.Security;

namespace Allocator.Host.Cluster;

/// <summary>This silo's certificate and the peers it accepts, read from <c>Allocator:Cluster:Tls</c>.</summary>
internal sealed partial class SiloTlsCredentials(X509Certificate2 certificate, SiloPeerTrust trust)
{
    public X509Certificate2 Certificate { get; } = certificate;

    public SiloPeerTrust Trust { get; } = trust;

    /// <summary>Where refusals are logged: set when the silo starts (its TLS options are made before its services).</summary>
    public ILogger Log { get; set; } = NullLogger.Instance;

    /// <summary>The package's validation callback: the verdict of <see cref="Trust"/>, a refusal logged with its reason.</summary>
    public bool Accepts(X509Certificate2 peer, X509Chain? chain)
    {
        var refusal = Trust.Refusal(peer, chain?.ChainPolicy.ExtraStore);
        if (refusal is not null)
        {
            LogRefused(Log, peer.Subject, SiloPeerTrust.Fingerprint(peer), refusal);
        }

        return refusal is null;
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Refused a silo connection: the peer's certificate {Subject} (SHA-256 {Fingerprint}) is not trusted: {Reason}.")]
    private static partial void LogRefused(ILogger logger, string subject, string fingerprint, string reason);
}

/// <summary>
/// Mutual TLS between silos with <c>Microsoft.Orleans.Connections.Security</c>: every silo-to-silo
/// connection (and the gateway's, when one is open) is TLS 1.2 or 1.3, both ends present a
/// certificate, and each end accepts the other's only when <see cref="SiloPeerTrust"/> does.
/// docs/clustering.md.
/// </summary>
internal static class SiloTls
{
    private const string Setting = AllocatorClusterOptions.Section + ":Tls";

    /// <summary>
    /// Checks the settings and reads the files. Null when TLS is off.
    /// </summary>
    /// <exception cref="InvalidOperationException">Every problem found, each naming its setting (never the password).</exception>
    public static SiloTlsCredentials? Load(AllocatorClusterTlsOptions options, TimeProvider time)
    {
        var failures = new List<string>();
        var anySet = options.CertificatePath is not null || options.KeyPath is not null || options.Password is not null
            || options.TrustedCaPath is not null || options.TrustedThumbprints.Count > 0;
        if (options.Enabled is null && anySet)
        {
            throw new InvalidOperationException($"{Setting} has settings but {Setting}:Enabled is not set: set it to true to use TLS between silos (or to false to run without).");
        }

        if (options.Enabled != true)
        {
            return null;
        }

        if (string.IsNullOrWhiteSpace(options.CertificatePath))
        {
            failures.Add($"{Setting}:CertificatePath must name this silo's certificate (PKCS#12, or PEM with its key) when {Setting}:Enabled is true.");
        }

        foreach (var fingerprint in options.TrustedThumbprints.Where(f => !SiloPeerTrust.IsFingerprint(f)))
        {
            failures.Add($"{Setting}:TrustedThumbprints: '{fingerprint}' is not a SHA-256 fingerprint (64 hex digits; colons allowed).");
        }

        var authorities = options.TrustedCaPath is { } caPath ? LoadAuthorities(caPath, failures) : [];
        var certificate = string.IsNullOrWhiteSpace(options.CertificatePath) ? null : LoadCertificate(options, failures);
        if (certificate is null || failures.Count > 0)
        {
            certificate?.Dispose();
            throw Invalid(failures);
        }

        var now = time.GetUtcNow();
        if (now > certificate.NotAfter.ToUniversalTime() || now < certificate.NotBefore.ToUniversalTime())
        {
            failures.Add($"{Setting}:CertificatePath: the certificate {certificate.Subject} is valid from {certificate.NotBefore.ToUniversalTime():u} to {certificate.NotAfter.ToUniversalTime():u}, not now.");
        }

        if (!SiloPeerTrust.AllowsSiloUse(certificate))
        {
            failures.Add($"{Setting}:CertificatePath: the certificate {certificate.Subject} must allow both TLS server and client authentication (extended key usages 1.3.6.1.5.5.7.3.1 and .2), or name no extended key usage: a silo both accepts and makes connections.");
        }

        // Neither a CA nor fingerprints: the cluster shares one certificate, and only it is trusted.
        var fingerprints = authorities.Count == 0 && options.TrustedThumbprints.Count == 0
            ? [SiloPeerTrust.Fingerprint(certificate)]
            : options.TrustedThumbprints;
        var trust = new SiloPeerTrust(authorities, fingerprints, time);
        if (failures.Count == 0 && trust.Refusal(certificate) is { } refusal)
        {
            // Its peers, configured alike, would refuse it: better said here than as failed joins.
            failures.Add($"{Setting}: this silo's own certificate {certificate.Subject} is not trusted by its own trust settings ({refusal}), so peers configured alike would refuse it: list its CA in TrustedCaPath or its fingerprint {SiloPeerTrust.Fingerprint(certificate)} in TrustedThumbprints.");
        }

        if (failures.Count > 0)
        {
            certificate.Dispose();
            throw Invalid(failures);
        }

        return new SiloTlsCredentials(certificate, trust);
    }

    /// <summary>
    /// Turns TLS on for the silo's connections with <paramref name="credentials"/> (nothing when
    /// null), and reports at start how the silo port is protected.
    /// </summary>
    public static ISiloBuilder UseAllocatorTls(this ISiloBuilder silo, SiloTlsCredentials? credentials, IPAddress advertised, int siloPort)
    {
        silo.Services.AddSingleton<ILifecycleParticipant<ISiloLifecycle>>(sp =>
            new SiloTlsReport(credentials, advertised, siloPort, sp.GetRequiredService<ILoggerFactory>()));
        if (credentials is null)
        {
            return silo;
        }

        return silo.UseTls(credentials.Certificate, tls =>
        {
            // Inbound: the dialling silo must present a certificate; outbound: so must the one
            // dialled, and this silo presents its own (a start-up error if it cannot be used so).
            tls.RemoteCertificateMode = RemoteCertificateMode.RequireCertificate;
            tls.ClientCertificateMode = RemoteCertificateMode.RequireCertificate;

            // The package then leaves the verdict to this callback alone (not the machine's trust
            // store, nor the host name: silos are dialled by IP address).
            tls.RemoteCertificateValidation = (certificate, chain, _) => credentials.Accepts(certificate, chain);
        });
    }

    private static X509Certificate2? LoadCertificate(AllocatorClusterTlsOptions options, List<string> failures)
    {
        var path = options.CertificatePath!;
        if (!File.Exists(path))
        {
            failures.Add($"{Setting}:CertificatePath '{path}' does not exist.");
            return null;
        }

        if (options.KeyPath is { } keyPath && !File.Exists(keyPath))
        {
            failures.Add($"{Setting}:KeyPath '{keyPath}' does not exist.");
            return null;
        }

        X509Certificate2? certificate = null;
        try
        {
            if (IsPem(path))
            {
                certificate = string.IsNullOrEmpty(options.Password)
                    ? X509Certificate2.CreateFromPemFile(path, options.KeyPath)
                    : X509Certificate2.CreateFromEncryptedPemFile(path, options.Password, options.KeyPath);
            }
            else if (options.KeyPath is not null)
            {
                failures.Add($"{Setting}:KeyPath is for a PEM certificate; '{path}' is not PEM (a PKCS#12 file holds its key).");
                return null;
            }
            else
            {
                certificate = X509CertificateLoader.LoadPkcs12FromFile(path, options.Password);
            }
        }
        catch (Exception ex) when (ex is CryptographicException or IOException or UnauthorizedAccessException or ArgumentException)
        {
            // The runtime's message names neither the password nor the key.
            failures.Add($"{Setting}:CertificatePath '{path}' could not be read as a certificate with its private key{(options.KeyPath is null ? "" : $" (key: {options.KeyPath})")}: {ex.Message}");
            return null;
        }

        if (!certificate.HasPrivateKey)
        {
            failures.Add($"{Setting}:CertificatePath '{path}' holds the certificate {certificate.Subject} without its private key.");
            certificate.Dispose();
            return null;
        }

        return certificate;
    }

    private static X509Certificate2Collection LoadAuthorities(string path, List<string> failures)
    {
        var authorities = new X509Certificate2Collection();
        var before = failures.Count;
        if (!File.Exists(path))
        {
            failures.Add($"{Setting}:TrustedCaPath '{path}' does not exist.");
            return authorities;
        }

        try
        {
            if (IsPem(path))
            {
                authorities.ImportFromPemFile(path);
            }
            else
            {
                authorities.Add(X509CertificateLoader.LoadCertificateFromFile(path));
            }
        }
        catch (Exception ex) when (ex is CryptographicException or IOException or UnauthorizedAccessException)
        {
            failures.Add($"{Setting}:TrustedCaPath '{path}' could not be read as PEM or DER certificates: {ex.Message}");
        }

        if (authorities.Count == 0 && failures.Count == before)
        {
            failures.Add($"{Setting}:TrustedCaPath '{path}' holds no certificate.");
        }

        return authorities;
    }

    private static bool IsPem(string path)
    {
        // PEM may follow comment lines (openssl writes "Bag Attributes" before it).
        var head = File.ReadAllBytes(path);
        return Encoding.ASCII.GetString(head, 0, Math.Min(head.Length, 64 * 1024)).Contains("-----BEGIN ", StringComparison.Ordinal);
    }

    private static InvalidOperationException Invalid(List<string> failures) => new(string.Join(" ", failures));
}

/// <summary>Says at start how the silo port is protected, and gives the TLS credentials their logger for refusals.</summary>
internal sealed partial class SiloTlsReport(SiloTlsCredentials? credentials, IPAddress advertised, int siloPort, ILoggerFactory loggers)
    : ILifecycleParticipant<ISiloLifecycle>
{
    private readonly ILogger _logger = loggers.CreateLogger<SiloTlsReport>();

    public void Participate(ISiloLifecycle lifecycle) =>
        lifecycle.Subscribe(nameof(SiloTlsReport), ServiceLifecycleStage.First, _ =>
        {
            if (credentials is { } tls)
            {
                tls.Log = _logger;
                LogTlsOn(_logger, siloPort, tls.Certificate.Subject, SiloPeerTrust.Fingerprint(tls.Certificate), tls.Certificate.NotAfter.ToUniversalTime(), tls.Trust.Describe());
            }
            else if (!IPAddress.IsLoopback(advertised))
            {
                LogPlaintext(_logger, siloPort, advertised);
            }

            return Task.CompletedTask;
        });

    [LoggerMessage(Level = LogLevel.Information, Message = "Silo port {SiloPort}: mutual TLS. This silo presents {Subject} (SHA-256 {Fingerprint}, valid until {NotAfter:u}) and accepts peers presenting {Trusted}.")]
    private static partial void LogTlsOn(ILogger logger, int siloPort, string subject, string fingerprint, DateTime notAfter, string trusted);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Silo port {SiloPort} on {Address} is plaintext: anything that reaches it can call the grains. Keep it on a network only the instances reach, and turn on Allocator:Cluster:Tls (docs/clustering.md).")]
    private static partial void LogPlaintext(ILogger logger, int siloPort, IPAddress address);
}
