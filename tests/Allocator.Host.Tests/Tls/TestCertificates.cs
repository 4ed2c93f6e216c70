using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Allocator.Host.Tests.Tls;

/// <summary>
/// Throwaway certificates for the silo TLS tests, made in the test (never checked in): ECDSA P-256
/// authorities and silo certificates, written as PKCS#12 or PEM to a temporary folder that is
/// deleted with this object.
/// </summary>
internal sealed class TestCertificates : IDisposable
{
    public const string Password = "pfx-password-for-tests";

    private readonly DirectoryInfo _folder = Directory.CreateTempSubdirectory("allocator-tls-");

    public static DateTimeOffset Now => TimeProvider.System.GetUtcNow();

    /// <summary>A self-signed certificate authority, valid for a day around now.</summary>
    public static X509Certificate2 NewAuthority(string name)
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest($"CN={name}", key, HashAlgorithmName.SHA256);
        request.CertificateExtensions.Add(new X509BasicConstraintsExtension(certificateAuthority: true, hasPathLengthConstraint: true, pathLengthConstraint: 0, critical: true));
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.KeyCertSign | X509KeyUsageFlags.CrlSign, critical: true));
        request.CertificateExtensions.Add(new X509SubjectKeyIdentifierExtension(request.PublicKey, critical: false));
        return request.CreateSelfSigned(Now.AddHours(-1), Now.AddDays(1));
    }

    /// <summary>
    /// A silo certificate with its private key: signed by <paramref name="issuer"/>, or self-signed
    /// when null. Usable for TLS server and client authentication unless <paramref name="serverOnly"/>.
    /// </summary>
    public static X509Certificate2 NewSilo(string name, X509Certificate2? issuer, bool serverOnly = false, DateTimeOffset? notBefore = null, DateTimeOffset? notAfter = null)
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest($"CN={name}", key, HashAlgorithmName.SHA256);
        request.CertificateExtensions.Add(new X509BasicConstraintsExtension(certificateAuthority: false, hasPathLengthConstraint: false, pathLengthConstraint: 0, critical: true));
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.DigitalSignature, critical: true));
        var usages = new OidCollection { new("1.3.6.1.5.5.7.3.1") };
        if (!serverOnly)
        {
            usages.Add(new Oid("1.3.6.1.5.5.7.3.2"));
        }

        request.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension(usages, critical: false));
        var from = notBefore ?? Now.AddMinutes(-30);
        var to = notAfter ?? Now.AddHours(12);
        if (issuer is null)
        {
            return request.CreateSelfSigned(from, to);
        }

        request.CertificateExtensions.Add(X509AuthorityKeyIdentifierExtension.CreateFromCertificate(issuer, includeKeyIdentifier: true, includeIssuerAndSerial: false));
        using var signed = request.Create(issuer, from, to, RandomNumberGenerator.GetBytes(16));
        return signed.CopyWithPrivateKey(key);
    }

    /// <summary>Writes the certificate and its key as a password-protected PKCS#12 file.</summary>
    public string WritePfx(X509Certificate2 certificate, string name, string? password = Password)
    {
        var path = Path.Combine(_folder.FullName, name + ".pfx");
        File.WriteAllBytes(path, certificate.ExportPkcs12(Pkcs12ExportPbeParameters.Pbes2Aes256Sha256, password));
        return path;
    }

    /// <summary>Writes certificates (no keys) as one PEM file: a bundle of authorities, or a certificate alone.</summary>
    public string WritePem(string name, params X509Certificate2[] certificates)
    {
        var path = Path.Combine(_folder.FullName, name + ".pem");
        File.WriteAllText(path, string.Concat(certificates.Select(c => c.ExportCertificatePem() + "\n")));
        return path;
    }

    /// <summary>Writes the certificate's private key as an unencrypted PKCS#8 PEM file.</summary>
    public string WriteKeyPem(X509Certificate2 certificate, string name)
    {
        var path = Path.Combine(_folder.FullName, name + ".key");
        using var key = certificate.GetECDsaPrivateKey()!;
        File.WriteAllText(path, key.ExportPkcs8PrivateKeyPem());
        return path;
    }

    /// <summary>A path in the folder with no file at it.</summary>
    public string Missing(string name) => Path.Combine(_folder.FullName, name);

    /// <summary>Writes arbitrary bytes (a file that is no certificate).</summary>
    public string WriteBytes(string name, byte[] content)
    {
        var path = Path.Combine(_folder.FullName, name);
        File.WriteAllBytes(path, content);
        return path;
    }

    public void Dispose() => _folder.Delete(recursive: true);
}
