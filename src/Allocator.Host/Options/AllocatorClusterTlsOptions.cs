namespace Allocator.Host.Options;

/// <summary>
/// Mutual TLS between silos. Bound from <c>Allocator:Cluster:Tls</c>; checked, and the files
/// read, when the host is built (a problem stops the start, never a fall back to plaintext). Every
/// silo presents <see cref="CertificatePath"/> on the connections it makes and accepts, and accepts
/// only peers whose certificate its trust settings name; the machine's trust store is never
/// consulted. Every instance of a cluster needs TLS on alike. See docs/clustering.md.
/// </summary>
public sealed class AllocatorClusterTlsOptions
{
    /// <summary>
    /// <c>true</c>: silos talk over mutual TLS. <c>false</c>: plaintext (the default; silo ports then
    /// belong on a network only the instances reach). Left unset while another TLS setting is set
    /// stops the start, so a certificate never sits unused by mistake.
    /// </summary>
    public bool? Enabled { get; set; }

    /// <summary>
    /// This silo's certificate with its private key: a PKCS#12 file (.pfx/.p12), or a PEM file
    /// with the certificate (and the key, unless <see cref="KeyPath"/> names another PEM file).
    /// The format is told from the content. If it has an extended key usage extension, it must
    /// allow both server and client authentication (a silo both accepts and makes connections).
    /// </summary>
    public string? CertificatePath { get; set; }

    /// <summary>For a PEM certificate: the PEM file of its private key, when it is not in the certificate's file.</summary>
    public string? KeyPath { get; set; }

    /// <summary>The PKCS#12 file's password, or the encrypted PEM key's. A secret: never logged.</summary>
    public string? Password { get; set; }

    /// <summary>
    /// A PEM (one or more certificates) or DER file of the certificate authorities whose
    /// certificates this silo accepts from peers: a peer is trusted when its chain ends at one of
    /// them. Use a CA of the cluster's own: anything it signed can join.
    /// </summary>
    public string? TrustedCaPath { get; set; }

    /// <summary>
    /// SHA-256 fingerprints of peer certificates this silo accepts (64 hex digits; colons and
    /// spaces are ignored, as <c>openssl x509 -noout -fingerprint -sha256</c> prints them). With
    /// <see cref="TrustedCaPath"/> too, a peer is trusted by either. With neither, a silo accepts only
    /// peers that present its own certificate (one certificate shared by the cluster).
    /// </summary>
    public List<string> TrustedThumbprints { get; set; } = [];
}
