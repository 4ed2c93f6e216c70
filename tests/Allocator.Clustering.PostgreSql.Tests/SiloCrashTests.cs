using System.Diagnostics;
using System.Globalization;
using System.Net;
using Allocator.Networking;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Orleans.Configuration;
using Orleans.Hosting;
using Orleans.Runtime;
using Xunit.Abstractions;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>
/// A silo in another process is killed (SIGKILL: no shutdown, no goodbye in the table). The
/// survivor must find out by probing, vote, and declare it Dead through our UpdateMembershipKey,
/// suspicion votes included. Prints how long that took; asserts only that it happens.
/// </summary>
public sealed class SiloCrashTests(ITestOutputHelper output) : IAsyncLifetime
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(90);

    private readonly string _schema = ClusteringTestDatabase.NewSchema();
    private readonly List<IHost> _hosts = [];
    private readonly List<Process> _processes = [];

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync()
    {
        foreach (var process in _processes)
        {
            if (!process.HasExited)
            {
                process.Kill(entireProcessTree: true);
            }

            process.Dispose();
        }

        foreach (var host in _hosts)
        {
            using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            try
            {
                await host.StopAsync(stop.Token);
            }
            catch (OperationCanceledException)
            {
                // Slow to stop: disposing tears it down anyway.
            }

            host.Dispose();
        }

        await ClusteringTestDatabase.DropSchemaAsync(_schema);
    }

    /// <summary>The settings docs/clustering.md recommends, and Orleans' defaults, side by side.</summary>
    [Theory]
    [InlineData("recommended", 2000, 3)]
    [InlineData("orleans-defaults", 5000, 3)]
    public async Task KilledSilo_IsDeclaredDeadByTheSurvivor_ThroughTheTable(string settings, int probeTimeoutMs, int missedProbes)
    {
        var clusterId = $"crash-{settings}-{Guid.NewGuid().ToString("N")[..6]}";
        var survivor = await StartSiloAsync(clusterId, probeTimeoutMs, missedProbes);
        var (victim, victimGeneration) = await StartSiloProcessAsync(clusterId, probeTimeoutMs, missedProbes);
        var membership = survivor.Services.GetRequiredService<IClusterMembershipService>();
        var self = survivor.Services.GetRequiredService<ILocalSiloDetails>().SiloAddress;
        SiloAddress? victimAddress = null;
        await WaitForAsync(membership, s =>
        {
            // Generations are start times in seconds: two silos started in one second share one.
            victimAddress = s.Members.Keys.SingleOrDefault(a => a.Generation == victimGeneration && !a.Equals(self));
            return victimAddress is not null && s.GetSiloStatus(victimAddress) == SiloStatus.Active;
        }, "the survivor to see the process silo Active");

        var clock = Stopwatch.StartNew();
        victim.Kill();
        await WaitForAsync(membership, s => s.GetSiloStatus(victimAddress!) == SiloStatus.Dead, "the survivor to declare the killed silo Dead");
        var detected = clock.Elapsed;

        output.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"{settings}: ProbeTimeout {probeTimeoutMs} ms, NumMissedProbesLimit {missedProbes}: killed silo declared Dead after {detected.TotalSeconds:F1} s (shared 2-core machine)"));
        var survivorAddress = survivor.Services.GetRequiredService<ILocalSiloDetails>().SiloAddress;
        var (status, votes) = await RowAsync(clusterId, victimGeneration, victimAddress!.Endpoint.Port);
        status.Should().Be((int)SiloStatus.Dead);
        votes.Should().Contain(survivorAddress.ToParsableString(), "the declaration records the survivor's vote");
    }

    private async Task<IHost> StartSiloAsync(string clusterId, int probeTimeoutMs, int missedProbes)
    {
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { DisableDefaults = true });
        builder.Logging.ClearProviders();
        builder.Logging.AddProvider(new TestOutputLoggerProvider(output, "survivor"));
        builder.UseOrleans(silo =>
        {
            silo.UseAllocatorPostgresClustering(o =>
            {
                o.ConnectionString = ClusteringTestDatabase.ConnectionString;
                o.Schema = _schema;
            });
            silo.Configure<ClusterOptions>(o =>
            {
                o.ClusterId = clusterId;
                o.ServiceId = "allocator-tests";
            });
            silo.Configure<ClusterMembershipOptions>(o =>
            {
                o.ProbeTimeout = TimeSpan.FromMilliseconds(probeTimeoutMs);
                o.NumMissedProbesLimit = missedProbes;
            });
            silo.ConfigureEndpoints(IPAddress.Loopback, FreePort.Next(), FreePort.Next());
        });

        var host = builder.Build();
        _hosts.Add(host);
        using var start = new CancellationTokenSource(Patience);
        await host.StartAsync(start.Token);
        return host;
    }

    private async Task<(Process Process, int Generation)> StartSiloProcessAsync(string clusterId, int probeTimeoutMs, int missedProbes)
    {
        var dll = Path.Combine(AppContext.BaseDirectory, "Allocator.Clustering.PostgreSql.TestSilo.dll");
        File.Exists(dll).Should().BeTrue($"the test silo is built next to the tests ({dll})");
        var start = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") is { Length: > 0 } host ? host : "dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (var arg in new[]
        {
            dll, ClusteringTestDatabase.ConnectionString, _schema, clusterId,
            FreePort.Next().ToString(CultureInfo.InvariantCulture), FreePort.Next().ToString(CultureInfo.InvariantCulture),
            probeTimeoutMs.ToString(CultureInfo.InvariantCulture), missedProbes.ToString(CultureInfo.InvariantCulture),
        })
        {
            start.ArgumentList.Add(arg);
        }

        var process = Process.Start(start) ?? throw new InvalidOperationException("The test silo process did not start.");
        _processes.Add(process);
        var errors = process.StandardError.ReadToEndAsync();
        using var timeout = new CancellationTokenSource(Patience);
        try
        {
            while (await process.StandardOutput.ReadLineAsync(timeout.Token) is { } line)
            {
                if (line.StartsWith("READY ", StringComparison.Ordinal))
                {
                    return (process, int.Parse(line["READY ".Length..], CultureInfo.InvariantCulture));
                }
            }
        }
        catch (OperationCanceledException) when (timeout.IsCancellationRequested)
        {
            throw new TimeoutException($"Timed out after {Patience.TotalSeconds:F0} s waiting for the test silo process to print READY.");
        }

        throw new InvalidOperationException($"The test silo process ended before it was ready (exit code {process.ExitCode}): {await errors}");
    }

    private async Task<(int Status, string Votes)> RowAsync(string clusterId, int generation, int port)
    {
        await using var command = ClusteringTestDatabase.DataSource.CreateCommand(
            $"SELECT status, coalesce(suspect_times, '') FROM \"{_schema}\".membership WHERE cluster_id = $1 AND generation = $2 AND port = $3");
        command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = clusterId });
        command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = generation });
        command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = port });
        await using var reader = await command.ExecuteReaderAsync();
        (await reader.ReadAsync()).Should().BeTrue("the killed silo's row is still there");
        return (reader.GetInt32(0), reader.GetString(1));
    }

    private static async Task WaitForAsync(IClusterMembershipService membership, Func<ClusterMembershipSnapshot, bool> condition, string what)
    {
        var deadline = Stopwatch.StartNew();
        while (!condition(membership.CurrentSnapshot))
        {
            if (deadline.Elapsed > Patience)
            {
                throw new TimeoutException($"Timed out after {Patience.TotalSeconds:F0} s waiting for {what}. Last snapshot: {membership.CurrentSnapshot}");
            }

            await Task.Delay(50);
        }
    }

}
