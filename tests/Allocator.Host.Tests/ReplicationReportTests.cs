using System.Text.Json.Nodes;
using Microsoft.Extensions.DependencyInjection;
using OpenTelemetry;
using OpenTelemetry.Logs;

namespace Allocator.Host.Tests;

/// <summary>The service says how its database replicates commits (issue 48): /health and the start-up log.</summary>
public sealed class ReplicationReportTests
{
    [Fact]
    public async Task Health_AndTheStartUpLog_SayTheTestsServerReplicatesToNoStandby()
    {
        var logs = new List<LogRecord>();
        var host = await TestHost.StartAsync([$"--ConnectionStrings:Allocator={TestPostgres.ConnectionString}", "--Logging:LogLevel:Allocator.Host.Storage.ReplicationWatch=Information"],
            configure: builder => builder.Services.AddOpenTelemetry().WithLogging(l => l.AddInMemoryExporter(logs)));
        await using (host)
        {
            using var http = host.NewHttp(null);

            // Read right after the start, in the background: there within a moment.
            JsonNode? replication = null;
            for (var clock = System.Diagnostics.Stopwatch.StartNew(); replication is null && clock.Elapsed < TimeSpan.FromSeconds(30); await Task.Delay(100))
            {
                replication = JsonNode.Parse(await http.GetStringAsync("health"))!["replication"];
            }

            replication.Should().NotBeNull("/health names each database's replication once it was read");
            replication!["default"]!.GetValue<string>().Should().Be("none", "the tests' PostgreSQL has no standby");
            lock (logs)
            {
                logs.Should().Contain(l => l.FormattedMessage == "Allocator store replication: database 'default' is none (no standby connected).");
            }
        }
    }
}
