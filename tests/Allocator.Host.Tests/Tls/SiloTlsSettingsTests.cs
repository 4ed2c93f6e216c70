using System.Security.Cryptography.X509Certificates;
using Allocator.Host.Cluster;
using Allocator.Host.Options;

namespace Allocator.Host.Tests.Tls;

/// <summary>
/// <c>Allocator:Cluster:Tls</c> is checked, and its files read, when the host is built: a setting
/// or file that cannot give mutual TLS stops the start with a message naming it (never the
/// password), instead of a silo that runs plaintext or fails its joins later.
/// </summary>
public sealed class SiloTlsSettingsTests : IDisposable
{
    private readonly TestCertificates _files = new();
    private readonly X509Certificate2 _ca = TestCertificates.NewAuthority("Allocator test cluster CA");

    public void Dispose()
    {
        _ca.Dispose();
        _files.Dispose();
    }

    [Fact]
    public void NoTlsSettings_TlsIsOff()
    {
        SiloTls.Load(new AllocatorClusterTlsOptions(), TimeProvider.System).Should().BeNull();
        SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = false, CertificatePath = "/nowhere.pfx" }, TimeProvider.System)
            .Should().BeNull("Enabled=false is an explicit choice");
    }

    [Fact]
    public void TheHostDoesNotStart_WhenTlsIsOnWithAMissingCertificate()
    {
        var missing = _files.Missing("silo.pfx");
        var build = () => AllocatorApp.Build(["--Allocator:Cluster:Tls:Enabled=true", $"--Allocator:Cluster:Tls:CertificatePath={missing}"]);

        build.Should().Throw<InvalidOperationException>().WithMessage($"*Allocator:Cluster:Tls:CertificatePath '{missing}' does not exist*");
    }

    [Fact]
    public void CertificateSetButEnabledUnset_IsAnError_NotSilentlyPlaintext()
    {
        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { CertificatePath = "/etc/allocator/silo.pfx" }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*Allocator:Cluster:Tls:Enabled is not set*");
    }

    [Fact]
    public void EnabledWithoutCertificate_IsAnError()
    {
        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*Allocator:Cluster:Tls:CertificatePath must name*");
    }

    [Fact]
    public void WrongPassword_IsAnError_ThatDoesNotShowThePassword()
    {
        using var silo = TestCertificates.NewSilo("silo", _ca);
        var path = _files.WritePfx(silo, "silo");
        const string wrong = "not-the-password-123";

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path, Password = wrong }, TimeProvider.System);

        var error = load.Should().Throw<InvalidOperationException>().WithMessage($"*CertificatePath '{path}' could not be read*").Which;
        error.Message.Should().NotContain(wrong).And.NotContain(TestCertificates.Password);
    }

    [Fact]
    public void APemCertificateWithoutItsKey_IsAnError()
    {
        using var silo = TestCertificates.NewSilo("silo", _ca);
        var path = _files.WritePem("silo-cert-only", silo);

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage($"*CertificatePath '{path}' could not be read as a certificate with its private key*");
    }

    [Fact]
    public void APfxWithoutAPrivateKey_IsAnError()
    {
        using var silo = TestCertificates.NewSilo("silo", _ca);
        using var publicOnly = X509CertificateLoader.LoadCertificate(silo.RawData);
        var path = _files.WriteBytes("public-only.pfx", publicOnly.Export(X509ContentType.Pkcs12, TestCertificates.Password)!);

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path, Password = TestCertificates.Password }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*without its private key*");
    }

    [Fact]
    public void NotACertificate_IsAnError()
    {
        var path = _files.WriteBytes("garbage.pfx", [1, 2, 3, 4, 5]);

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage($"*CertificatePath '{path}' could not be read*");
    }

    [Fact]
    public void AnExpiredCertificate_IsAnError()
    {
        using var silo = TestCertificates.NewSilo("expired", _ca, notBefore: TestCertificates.Now.AddMinutes(-50), notAfter: TestCertificates.Now.AddMinutes(-5));
        var path = _files.WritePfx(silo, "expired");

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path, Password = TestCertificates.Password }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*CN=expired is valid from * to *, not now*");
    }

    [Fact]
    public void ACertificateForServersOnly_IsAnError()
    {
        using var silo = TestCertificates.NewSilo("server-only", _ca, serverOnly: true);
        var path = _files.WritePfx(silo, "server-only");

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path, Password = TestCertificates.Password }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*must allow both TLS server and client authentication*");
    }

    [Fact]
    public void OwnCertificateFromAnotherCa_IsAnError_BecausePeersConfiguredAlikeWouldRefuseIt()
    {
        using var other = TestCertificates.NewAuthority("Some other CA");
        using var silo = TestCertificates.NewSilo("silo", other);
        var path = _files.WritePfx(silo, "silo");
        var caPath = _files.WritePem("ca", _ca);

        var load = () => SiloTls.Load(new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = path, Password = TestCertificates.Password, TrustedCaPath = caPath }, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>().WithMessage("*own certificate CN=silo is not trusted by its own trust settings*");
    }

    [Fact]
    public void MalformedFingerprintsAMissingCaFileAndAWrongPassword_AreAllNamed()
    {
        using var silo = TestCertificates.NewSilo("silo", _ca);
        var path = _files.WritePfx(silo, "silo");
        var options = new AllocatorClusterTlsOptions
        {
            Enabled = true,
            CertificatePath = path,
            Password = "wrong",
            TrustedCaPath = _files.Missing("ca.pem"),
            TrustedThumbprints = ["ABCD"],
        };

        var load = () => SiloTls.Load(options, TimeProvider.System);

        load.Should().Throw<InvalidOperationException>()
            .WithMessage("*TrustedThumbprints: 'ABCD' is not a SHA-256 fingerprint*")
            .WithMessage("*TrustedCaPath '*ca.pem' does not exist*")
            .WithMessage($"*CertificatePath '{path}' could not be read*");
    }

    [Fact]
    public void PemCertificateAndKey_TrustedByFingerprintWithColons()
    {
        using var silo = TestCertificates.NewSilo("pem-silo", issuer: null);
        using var peer = TestCertificates.NewSilo("peer", issuer: null);
        var colons = string.Join(':', SiloPeerTrust.Fingerprint(peer).Chunk(2).Select(c => new string(c))).ToLowerInvariant();
        var options = new AllocatorClusterTlsOptions
        {
            Enabled = true,
            CertificatePath = _files.WritePem("pem-silo", silo),
            KeyPath = _files.WriteKeyPem(silo, "pem-silo"),
            TrustedThumbprints = [SiloPeerTrust.Fingerprint(silo), colons],
        };

        var credentials = SiloTls.Load(options, TimeProvider.System)!;

        credentials.Certificate.HasPrivateKey.Should().BeTrue();
        credentials.Trust.Refusal(peer).Should().BeNull("its fingerprint is listed");
        using var stranger = TestCertificates.NewSilo("stranger", issuer: null);
        credentials.Trust.Refusal(stranger).Should().Be("its SHA-256 fingerprint is not a trusted one");
    }

    [Fact]
    public void NoTrustSettings_OnlyTheSilosOwnCertificateIsTrusted()
    {
        using var silo = TestCertificates.NewSilo("shared", _ca);
        using var sibling = TestCertificates.NewSilo("sibling", _ca);
        var options = new AllocatorClusterTlsOptions { Enabled = true, CertificatePath = _files.WritePfx(silo, "shared"), Password = TestCertificates.Password };

        var credentials = SiloTls.Load(options, TimeProvider.System)!;

        credentials.Trust.Refusal(silo).Should().BeNull();
        credentials.Trust.Refusal(sibling).Should().NotBeNull("even the same CA's other certificates are not trusted without TrustedCaPath");
    }

    [Fact]
    public void TrustedCa_AcceptsWhatItIssued_RefusesOtherCasSelfSignedAndExpired()
    {
        using var silo = TestCertificates.NewSilo("silo-a", _ca);
        using var sibling = TestCertificates.NewSilo("silo-b", _ca);
        using var other = TestCertificates.NewAuthority("Other CA");
        using var foreign = TestCertificates.NewSilo("foreign", other);
        using var selfSigned = TestCertificates.NewSilo("silo-b", issuer: null);
        using var expired = TestCertificates.NewSilo("old", _ca, notBefore: TestCertificates.Now.AddMinutes(-50), notAfter: TestCertificates.Now.AddMinutes(-1));
        using var serverOnly = TestCertificates.NewSilo("server-only", _ca, serverOnly: true);
        var options = new AllocatorClusterTlsOptions
        {
            Enabled = true,
            CertificatePath = _files.WritePfx(silo, "silo-a"),
            Password = TestCertificates.Password,
            TrustedCaPath = _files.WritePem("ca", _ca),
        };

        var trust = SiloTls.Load(options, TimeProvider.System)!.Trust;

        trust.Refusal(sibling).Should().BeNull();
        trust.Refusal(foreign).Should().StartWith("its chain does not end at a trusted certificate authority");
        trust.Refusal(selfSigned).Should().StartWith("its chain does not end at a trusted certificate authority");
        trust.Refusal(expired).Should().StartWith("it expired at");
        trust.Refusal(serverOnly).Should().Be("its extended key usage does not allow both TLS server and client authentication");
    }
}
