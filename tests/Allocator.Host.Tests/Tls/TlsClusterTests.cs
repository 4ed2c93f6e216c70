using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography.X509Certificates;
using System.Text.RegularExpressions;
using Allocator.Client;
using Allocator.Networking;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;
using Xunit.Abstractions;

namespace Allocator.Host.Tests.Tls;

/// <summary>
/// Two host instances forming one Orleans cluster (membership in PostgreSQL) whose silos talk
/// over mutual TLS: each presents its own certificate, issued by a throwaway cluster CA made by the
/// test, and trusts that CA only (<c>Allocator:Cluster:Tls:TrustedCaPath</c>).
/// </summary>
public sealed class TlsClusterFixture : IAsyncLifetime
{
    private readonly TestCertificates _files = new();
    private readonly string _run = Guid.NewGuid().ToString("N")[..10];

    public X509Certificate2 Authority { get; } = TestCertificates.NewAuthority("Allocator test cluster CA");

    public string AuthorityPem { get; private set; } = "";

    public TestHost A { get; private set; } = null!;

    public TestHost B { get; private set; } = null!;

    public int SiloPortA { get; } = FreePort.Next();

    public int SiloPortB { get; private set; }

    /// <summary>Everything A logged at Warning and above: its refusals of untrusted peers.</summary>
    public FakeLogCollector LogsOfA { get; } = new();

    internal TestCertificates Files => _files;

    /// <summary>The settings every instance of this cluster shares, without TLS.</summary>
    public string[] Cluster =>
    [
        $"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}",
        "--Allocator:Cluster:Membership=postgres",
        $"--Allocator:Cluster:ClusterId=tls-{_run}",
        $"--Allocator:Cluster:MembershipSchema=cluster_tls_{_run}",
    ];

    public async Task InitializeAsync()
    {
        AuthorityPem = _files.WritePem("cluster-ca", Authority);
        A = await TestHost.StartAsync([.. Cluster, .. Tls("silo-a"), $"--Allocator:Cluster:SiloPort={SiloPortA}"], builder =>
            builder.Logging.AddProvider(new FakeLoggerProvider(LogsOfA)));
        SiloPortB = FreePort.Next();
        B = await TestHost.StartAsync([.. Cluster, .. Tls("silo-b"), $"--Allocator:Cluster:SiloPort={SiloPortB}"]);
    }

    /// <summary>TLS settings with a new certificate from the cluster's CA, written as PKCS#12.</summary>
    public string[] Tls(string name)
    {
        using var certificate = TestCertificates.NewSilo(name, Authority);
        return
        [
            "--Allocator:Cluster:Tls:Enabled=true",
            $"--Allocator:Cluster:Tls:CertificatePath={_files.WritePfx(certificate, name)}",
            $"--Allocator:Cluster:Tls:Password={TestCertificates.Password}",
            $"--Allocator:Cluster:Tls:TrustedCaPath={AuthorityPem}",
        ];
    }

    public async Task DisposeAsync()
    {
        try
        {
            if (B is not null)
            {
                await B.DisposeAsync();
            }

            if (A is not null)
            {
                await A.DisposeAsync();
            }
        }
        finally
        {
            // The keys go whatever happened to the hosts.
            Authority.Dispose();
            _files.Dispose();
        }
    }
}

public sealed partial class TlsClusterTests(TlsClusterFixture fixture, ITestOutputHelper log) : IClassFixture<TlsClusterFixture>
{
    /// <summary>
    /// An intruder gives up joining after this (Orleans' default is 5 minutes); a silo that joins
    /// first checks it can reach every active silo.
    /// </summary>
    private const string QuickJoin = "--Allocator:Cluster:Probing:MaxJoinAttemptTime=00:00:06";

    [Fact]
    public async Task TwoSilosOverMutualTls_ACallThroughOneInstanceIsServedByThePoolGrainOnTheOther()
    {
        var pool = await MultiInstanceTests.NewPoolAsync(fixture.A, "tls-pool", workers: 2, capacity: 5);
        var stats = await fixture.A.Broker.GetPoolAsync(pool);
        var grainPort = SiloPortOf(stats.GrainSilo!);
        grainPort.Should().BeOneOf(fixture.SiloPortA, fixture.SiloPortB);
        var (other, grainHost) = grainPort == fixture.SiloPortA ? (fixture.B, fixture.A) : (fixture.A, fixture.B);

        // Through the instance that does not host the grain: the call crosses the TLS silo port.
        var allocated = await other.Broker.AllocateAsync(pool, new AllocateRequest(), "over-tls");
        allocated.Status.Should().Be(AllocateStatus.Allocated);
        var seen = await other.Broker.GetPoolAsync(pool);
        SiloPortOf(seen.GrainSilo!).Should().Be(grainPort, "one grain for the cluster, on the other instance");
        seen.ActiveAllocations.Should().Be(1);
        (await grainHost.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(1);

        await other.Broker.ReleaseAsync(pool, allocated.Allocation!.AllocationId, allocated.Allocation.Epoch);
        (await grainHost.Broker.GetPoolAsync(pool)).ActiveAllocations.Should().Be(0);
    }

    [Fact]
    public async Task TheSiloPort_KeepsOnlyAConnectionWithATrustedCertificate()
    {
        using var member = TestCertificates.NewSilo("member-client", fixture.Authority);
        using var rogueCa = TestCertificates.NewAuthority("Rogue CA");
        using var rogue = TestCertificates.NewSilo("rogue-client", rogueCa);

        var anonymous = await SiloPortProbe.ConnectAsync(fixture.SiloPortA);
        var untrusted = await SiloPortProbe.ConnectAsync(fixture.SiloPortA, rogue);
        var trusted = await SiloPortProbe.ConnectAsync(fixture.SiloPortA, member);

        anonymous.Presented.Should().NotBeNull("the silo port speaks TLS");
        anonymous.Presented!.Subject.Should().Be("CN=silo-a");
        anonymous.Presented.Issuer.Should().Be(fixture.Authority.Subject);
        anonymous.Served.Should().BeFalse("a client without a certificate is cut off");
        untrusted.Served.Should().BeFalse("a client whose certificate another CA issued is cut off");
        trusted.Served.Should().BeTrue("the same client with a certificate from the cluster's CA is kept: the refusals above are the certificates'");
    }

    [Fact]
    public async Task ASiloWithoutTls_CannotJoin()
    {
        fixture.LogsOfA.Clear();

        var (exitCode, output) = await RunIntruderAsync(fixture.Cluster);

        exitCode.Should().NotBe(0, "the TLS silos accept no plaintext connection, so a plaintext silo reaches none of them: {0}", output);
        ShouldHaveFoundNoSiloToTalkTo(output);
        fixture.LogsOfA.GetSnapshot().Should().Contain(
            r => r.Category == "Orleans.Connections.Security.TlsServerConnectionMiddleware" && r.Message == "Authentication failed",
            "A's silo port expects a TLS handshake and got the plaintext silo's");
        await TheClusterStillServesAsync();
    }

    [Fact]
    public async Task ASiloWithACertificateTheClusterDoesNotTrust_CannotJoin_AndIsRefusedByName()
    {
        // The intruder trusts the cluster's CA (so it would accept the silos it dials), but its
        // own certificate comes from a CA of its own: the silos must refuse it themselves.
        using var rogueCa = TestCertificates.NewAuthority("Rogue CA");
        using var rogue = TestCertificates.NewSilo("rogue-silo", rogueCa);
        string[] tls =
        [
            "--Allocator:Cluster:Tls:Enabled=true",
            $"--Allocator:Cluster:Tls:CertificatePath={fixture.Files.WritePfx(rogue, "rogue")}",
            $"--Allocator:Cluster:Tls:Password={TestCertificates.Password}",
            $"--Allocator:Cluster:Tls:TrustedCaPath={fixture.Files.WritePem("rogue-trusts", fixture.Authority, rogueCa)}",
        ];
        fixture.LogsOfA.Clear();

        var (exitCode, output) = await RunIntruderAsync([.. fixture.Cluster, .. tls]);

        exitCode.Should().NotBe(0, "no silo of the cluster accepts a certificate its CA did not issue: {0}", output);
        ShouldHaveFoundNoSiloToTalkTo(output);
        fixture.LogsOfA.GetSnapshot().Should().Contain(
            r => r.Level == LogLevel.Warning && r.Message.Contains("Refused a silo connection: the peer's certificate CN=rogue-silo", StringComparison.Ordinal)
                && r.Message.Contains("does not end at a trusted certificate authority", StringComparison.Ordinal),
            "A says whom it refused and why");
        await TheClusterStillServesAsync();
    }

    /// <summary>
    /// The intruder leaves because it reached none of the cluster's silos: it gives up on them
    /// itself, or, on a loaded machine sooner, the silos that could not reach it either vote it dead
    /// and tell it through the membership table (a clean-clone run saw the second, 2026-12-02).
    /// </summary>
    private static void ShouldHaveFoundNoSiloToTalkTo(string output) =>
        output.Should().Match(
            o => o.Contains("Failed to get ping responses from 2 of 2 active silos", StringComparison.Ordinal)
                || o.Contains("I have been told I am dead", StringComparison.Ordinal),
            "the intruder reached no silo of the cluster: {0}",
            output);

    /// <summary>
    /// Runs an instance that tries to join the cluster in a process of its own (the cluster
    /// declares a silo that cannot answer its probes dead, and Orleans then ends that silo's
    /// process), and returns its exit code and everything it printed.
    /// </summary>
    private async Task<(int ExitCode, string Output)> RunIntruderAsync(IEnumerable<string> args)
    {
        var start = new ProcessStartInfo("dotnet")
        {
            WorkingDirectory = AppContext.BaseDirectory,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, "Allocator.Host.dll"));
        foreach (var arg in (string[])[
            "--urls", "http://127.0.0.1:0", "--environment", "Production", "--Logging:LogLevel:Default=Warning",
            .. args, QuickJoin, $"--Allocator:Cluster:SiloPort={FreePort.Next()}"])
        {
            start.ArgumentList.Add(arg);
        }

        using var intruder = Process.Start(start)!;
        var stdout = intruder.StandardOutput.ReadToEndAsync();
        var stderr = intruder.StandardError.ReadToEndAsync();
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(90));
        try
        {
            await intruder.WaitForExitAsync(limit.Token);
        }
        catch (OperationCanceledException)
        {
            intruder.Kill(entireProcessTree: true);
            throw new TimeoutException($"The intruder was still running after 90 s: {await stdout}{await stderr}");
        }

        var output = await stdout + await stderr;
        log.WriteLine($"intruder exited with {intruder.ExitCode}; its last lines:");
        foreach (var line in output.Split('\n').TakeLast(4))
        {
            log.WriteLine(line.Length > 400 ? line[..400] + "..." : line);
        }

        return (intruder.ExitCode, output);
    }

    private async Task TheClusterStillServesAsync()
    {
        var pool = await MultiInstanceTests.NewPoolAsync(fixture.B, "tls-after", workers: 1, capacity: 2);
        (await fixture.A.Broker.AllocateAsync(pool, new AllocateRequest(), "after-a")).Status.Should().Be(AllocateStatus.Allocated);
        (await fixture.B.Broker.AllocateAsync(pool, new AllocateRequest(), "after-b")).Status.Should().Be(AllocateStatus.Allocated);
    }

    private static int SiloPortOf(string grainSilo) =>
        int.Parse(SiloPort().Match(grainSilo).Groups[1].Value, CultureInfo.InvariantCulture);

    [GeneratedRegex(@":(\d+)@")]
    private static partial Regex SiloPort();
}
