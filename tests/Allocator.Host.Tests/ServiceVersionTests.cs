using System.Text.Json.Nodes;
using Microsoft.Extensions.DependencyInjection;
using OpenTelemetry;
using OpenTelemetry.Logs;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Allocator.Host.Tests;

/// <summary>The running service says which release it is (issue 38): start-up log, /health, service.version.</summary>
public sealed class ServiceVersionTests
{
    private static string ReleaseVersion => Repository.ReleaseVersion;

    [Theory]
    [InlineData("1.0.0+81a34ab631f92e8b78768a1e541604a8bb672b4b", "1.0.0", "81a34ab631f92e8b78768a1e541604a8bb672b4b")]
    [InlineData("1.1.0-rc.1", "1.1.0-rc.1", null)]
    [InlineData("1.0.0+", "1.0.0", null)]
    [InlineData(null, "0.0.0", null)]
    public void Parse_SplitsTheVersionFromTheCommit(string? informational, string version, string? commit) =>
        ServiceVersion.Parse(informational).Should().Be((version, commit));

    [Fact]
    public void ServiceVersion_IsTheReleaseVersionOfDirectoryBuildProps()
    {
        ReleaseVersion.Should().MatchRegex(@"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$", "a semantic version");
        ServiceVersion.Version.Should().Be(ReleaseVersion);
    }

    [Fact]
    public async Task Health_SaysTheVersion_AndTheStartUpLogAndTheResourceSayItToo()
    {
        var logs = new List<LogRecord>();
        var host = await TestHost.StartAsync(["--Logging:LogLevel:Allocator.Host.StartupReport=Information"], configure: builder => builder.Services.AddOpenTelemetry()
            .WithLogging(l => l.AddInMemoryExporter(logs))
            .WithTracing(t => t.AddInMemoryExporter(new List<System.Diagnostics.Activity>())));
        await using (host)
        {
            using var http = host.NewHttp(null);
            var health = JsonNode.Parse(await http.GetStringAsync("health"))!;
            health["version"]!.GetValue<string>().Should().Be(ReleaseVersion);
            var ready = JsonNode.Parse(await (await http.GetAsync("health/ready")).Content.ReadAsStringAsync())!;
            ready["version"]!.GetValue<string>().Should().Be(ReleaseVersion);

            logs.Should().Contain(l => l.FormattedMessage != null && l.FormattedMessage.StartsWith($"Allocator {ReleaseVersion} (commit ", StringComparison.Ordinal));

            var resource = host.Services.GetRequiredService<TracerProvider>().GetResource();
            resource.Attributes.Should().Contain(new KeyValuePair<string, object>("service.version", ReleaseVersion));
        }
    }
}
