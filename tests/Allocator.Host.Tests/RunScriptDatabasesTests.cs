using System.Diagnostics;
using System.Net.Http.Json;
using System.Text.Json;
using Allocator.Client;
using Xunit.Abstractions;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>eng/run.sh --databases 2</c> as a newcomer runs it (issue 23): a second PostgreSQL cluster of
/// its own, a pool on each database, the printed lines that show placement, and everything it
/// started stopped again on SIGTERM.
/// </summary>
public sealed class RunScriptDatabasesTests(ITestOutputHelper output)
{
    [Fact]
    public async Task TwoDatabases_DemoPoolsOnEach_AndTheSecondClusterStopsWithTheScript()
    {
        var wasRunning = (await PostgresScriptAsync("status", "--name", "db2")).Contains("running on", StringComparison.Ordinal);
        await using (var run = await RunScript.StartAsync(instances: 1, output, databases: 2))
        {
            var client = new AllocatorClient(new HttpClient { BaseAddress = run.Urls[0] }, run.Key);
            using var http = new HttpClient { BaseAddress = run.Urls[0] };

            (await client.GetPoolAsync("demo")).Database.Should().Be("default");
            (await client.GetPoolAsync("demo-2")).Database.Should().Be("db2");
            (await client.AllocateAsync("demo-2", new AllocateRequest(), $"s-{Guid.NewGuid():N}")).Status.Should().Be(AllocateStatus.Allocated);
            var health = await http.GetFromJsonAsync<JsonElement>("health");
            health.GetProperty("databases").EnumerateObject().Select(p => p.Name).Should().BeEquivalentTo(["default", "db2"]);
        }

        if (!wasRunning)
        {
            (await PostgresScriptAsync("status", "--name", "db2")).Should().Contain("not running", "the script stops the cluster it started");
        }
    }

    private static async Task<string> PostgresScriptAsync(params string[] args)
    {
        using var process = Process.Start(new ProcessStartInfo("bash", ["eng/postgres.sh", .. args]) { WorkingDirectory = Repository.Root, RedirectStandardOutput = true })!;
        var text = await process.StandardOutput.ReadToEndAsync();
        await process.WaitForExitAsync();
        return text;
    }
}
