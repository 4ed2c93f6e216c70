using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Allocator.Host.Cluster;

/// <summary>
/// Which peer certificates a silo accepts (<c>Allocator:Cluster:Tls</c>): one whose SHA-256
/// fingerprint is listed, or whose chain ends at one of the listed certificate authorities. Only
/// these count: the machine's trust store and host names play no part (silos dial each other by
/// IP address). A peer's certificate must also be valid now and, if it names extended key usages,
/// allow both server and client authentication, as a silo's own must.
/// </summary>
internal sealed class SiloPeerTrust
{
    public const string ServerAuthenticationOid = "1.3.6.1.5.5.7.3.1";
    public const string ClientAuthenticationOid = "1.3.6.1.5.5.7.3.2";

    private readonly X509Certificate2Collection _authorities;
    private readonly HashSet<string> _fingerprints;
    private readonly TimeProvider _time;

    public SiloPeerTrust(X509Certificate2Collection authorities, IEnumerable<string> fingerprints, TimeProvider time)
    {
        _authorities = authorities;
        _fingerprints = new HashSet<string>(fingerprints.Select(NormalizeFingerprint), StringComparer.Ordinal);
        _time = time;
    }

    /// <summary>Says in a few words who is trusted, for the start-up log (no secrets in it).</summary>
    public string Describe() =>
        (_authorities.Count, _fingerprints.Count) switch
        {
            (0, 1) => $"the certificate with SHA-256 fingerprint {_fingerprints.Single()}",
            (0, var n) => $"{n} certificates by SHA-256 fingerprint",
            (_, 0) => $"certificates issued by {string.Join("; ", _authorities.Select(a => a.Subject))}",
            (_, var n) => $"certificates issued by {string.Join("; ", _authorities.Select(a => a.Subject))}, and {n} more by SHA-256 fingerprint",
        };

    /// <summary>The SHA-256 fingerprint of a certificate: 64 upper-case hex digits.</summary>
    public static string Fingerprint(X509Certificate2 certificate) => certificate.GetCertHashString(HashAlgorithmName.SHA256);

    /// <summary>A fingerprint as written in configuration, without separators, upper case.</summary>
    public static string NormalizeFingerprint(string fingerprint) =>
        string.Concat(fingerprint.Where(c => c is not (':' or ' ' or '-'))).ToUpperInvariant();

    /// <summary>True when <paramref name="fingerprint"/> (normalized) is 64 hex digits.</summary>
    public static bool IsFingerprint(string fingerprint) =>
        NormalizeFingerprint(fingerprint) is { Length: 64 } hex && hex.All(char.IsAsciiHexDigit);

    /// <summary>True when the certificate has no extended key usage extension or one allowing both TLS server and client use.</summary>
    public static bool AllowsSiloUse(X509Certificate2 certificate)
    {
        var extensions = certificate.Extensions.OfType<X509EnhancedKeyUsageExtension>().ToList();
        return extensions.Count == 0 || extensions.All(e =>
            e.EnhancedKeyUsages.Cast<Oid>().Any(o => o.Value == ServerAuthenticationOid)
            && e.EnhancedKeyUsages.Cast<Oid>().Any(o => o.Value == ClientAuthenticationOid));
    }

    /// <summary>
    /// Null when <paramref name="certificate"/> is trusted; otherwise why not, in words for a log.
    /// </summary>
    /// <param name="presented">Certificates the peer sent along (intermediates), or null.</param>
    public string? Refusal(X509Certificate2 certificate, IEnumerable<X509Certificate2>? presented = null)
    {
        var now = _time.GetUtcNow();
        if (now < certificate.NotBefore.ToUniversalTime())
        {
            return $"it is not valid before {certificate.NotBefore.ToUniversalTime():u}";
        }

        if (now > certificate.NotAfter.ToUniversalTime())
        {
            return $"it expired at {certificate.NotAfter.ToUniversalTime():u}";
        }

        if (!AllowsSiloUse(certificate))
        {
            return "its extended key usage does not allow both TLS server and client authentication";
        }

        if (_fingerprints.Contains(Fingerprint(certificate)))
        {
            return null;
        }

        if (_authorities.Count == 0)
        {
            return "its SHA-256 fingerprint is not a trusted one";
        }

        using var chain = new X509Chain();
        chain.ChainPolicy.TrustMode = X509ChainTrustMode.CustomRootTrust;
        chain.ChainPolicy.CustomTrustStore.AddRange(_authorities);
        chain.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
        chain.ChainPolicy.VerificationTime = now.UtcDateTime;
        foreach (var extra in presented ?? [])
        {
            chain.ChainPolicy.ExtraStore.Add(extra);
        }

        if (chain.Build(certificate))
        {
            return null;
        }

        var problems = chain.ChainStatus.Select(s => s.Status.ToString()).Distinct();
        return $"its chain does not end at a trusted certificate authority ({string.Join(", ", problems)})";
    }
}
