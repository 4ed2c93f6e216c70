using System.Diagnostics;
using System.Net;
using Allocator.Networking;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans.Configuration;
using Orleans.Hosting;
using Orleans.Messaging;
using Orleans.Runtime;
using Xunit.Abstractions;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>
/// Real silos (generic host + Orleans, TCP on loopback) clustered through
/// <c>UseAllocatorPostgresClustering</c> on a schema that does not exist before the first silo
/// starts: the silo must create it before Orleans first reads membership.
/// </summary>
public sealed class TwoSiloClusterTests(ITestOutputHelper output) : IAsyncLifetime
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(60);

    private readonly string _schema = ClusteringTestDatabase.NewSchema();
    private readonly string _clusterId = "e2e-" + Guid.NewGuid().ToString("N")[..8];
    private readonly List<IHost> _hosts = [];

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync()
    {
        foreach (var host in _hosts)
        {
            using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            try
            {
                await host.StopAsync(stop.Token);
            }
            catch (OperationCanceledException)
            {
                // Already stopped or slow to stop: disposing tears it down anyway.
            }

            host.Dispose();
        }

        await ClusteringTestDatabase.DropSchemaAsync(_schema);
    }

    [Fact]
    public async Task TwoSilos_FormOneCluster_ClientFindsTheirGateways_SurvivorSeesAStoppedSiloDead()
    {
        (await ClusteringTestDatabase.ScalarAsync<bool>("SELECT to_regnamespace($1) IS NULL", _schema)).Should().BeTrue("the schema must not exist before the first silo starts");
        var clock = Stopwatch.StartNew();

        var a = await StartSiloAsync("silo-a");
        var b = await StartSiloAsync("silo-b");
        var addressA = SiloAddressOf(a);
        var addressB = SiloAddressOf(b);
        output.WriteLine($"both silos started after {clock.Elapsed.TotalSeconds:F1} s");

        await WaitForAsync(a, s => s.GetSiloStatus(addressB) == SiloStatus.Active, "silo-a to see silo-b Active");
        await WaitForAsync(b, s => s.GetSiloStatus(addressA) == SiloStatus.Active, "silo-b to see silo-a Active");
        (await StatusesInTableAsync()).Should().BeEquivalentTo(new Dictionary<int, int> { [addressA.Generation] = 3, [addressB.Generation] = 3 });
        output.WriteLine($"one cluster of two after {clock.Elapsed.TotalSeconds:F1} s");

        // A client finds both gateways in the table and connects (its start fails otherwise).
        var client = await StartClientAsync();
        (await client.Services.GetRequiredService<IGatewayListProvider>().GetGateways()).Should().HaveCount(2);

        using (var stop = new CancellationTokenSource(Patience))
        {
            await b.StopAsync(stop.Token);
        }

        await WaitForAsync(a, s => s.GetSiloStatus(addressB) == SiloStatus.Dead, "silo-a to see the stopped silo-b Dead");
        (await StatusesInTableAsync()).Should().BeEquivalentTo(new Dictionary<int, int> { [addressA.Generation] = 3, [addressB.Generation] = 6 });
        output.WriteLine($"silo-b seen dead after {clock.Elapsed.TotalSeconds:F1} s");
    }

    [Fact]
    public async Task Silo_InvalidClusteringOptions_FailsAtStartWithTheReason()
    {
        var act = () => StartSiloAsync("silo-bad", o => o.Schema = "Not-An-Identifier");

        (await act.Should().ThrowAsync<OptionsValidationException>()).WithMessage("*Not-An-Identifier*");
        (await ClusteringTestDatabase.ScalarAsync<bool>("SELECT to_regnamespace($1) IS NULL", _schema)).Should().BeTrue("nothing ran");
    }

    private async Task<IHost> StartSiloAsync(string name, Action<PostgresClusteringOptions>? tweak = null)
    {
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { DisableDefaults = true });
        builder.Logging.ClearProviders();
        builder.Logging.AddProvider(new TestOutputLoggerProvider(output, name));
        builder.UseOrleans(silo =>
        {
            silo.UseAllocatorPostgresClustering(o =>
            {
                o.ConnectionString = ClusteringTestDatabase.ConnectionString;
                o.Schema = _schema;
                tweak?.Invoke(o);
            });
            silo.Configure<ClusterOptions>(o =>
            {
                o.ClusterId = _clusterId;
                o.ServiceId = "allocator-tests";
            });
            silo.Configure<SiloOptions>(o => o.SiloName = name);
            silo.ConfigureEndpoints(IPAddress.Loopback, FreePort.Next(), FreePort.Next());
        });

        var host = builder.Build();
        try
        {
            using var start = new CancellationTokenSource(Patience);
            await host.StartAsync(start.Token);
        }
        catch
        {
            host.Dispose();
            throw;
        }

        _hosts.Add(host);
        return host;
    }

    private async Task<IHost> StartClientAsync()
    {
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { DisableDefaults = true });
        builder.Logging.ClearProviders();
        builder.Logging.AddProvider(new TestOutputLoggerProvider(output, "client"));
        builder.UseOrleansClient(client =>
        {
            client.UseAllocatorPostgresClustering(o =>
            {
                o.ConnectionString = ClusteringTestDatabase.ConnectionString;
                o.Schema = _schema;
            });
            client.Configure<ClusterOptions>(o =>
            {
                o.ClusterId = _clusterId;
                o.ServiceId = "allocator-tests";
            });
        });

        var host = builder.Build();
        _hosts.Insert(0, host);
        using var start = new CancellationTokenSource(Patience);
        await host.StartAsync(start.Token);
        return host;
    }

    private static SiloAddress SiloAddressOf(IHost host) => host.Services.GetRequiredService<ILocalSiloDetails>().SiloAddress;

    private static async Task WaitForAsync(IHost host, Func<ClusterMembershipSnapshot, bool> condition, string what)
    {
        var membership = host.Services.GetRequiredService<IClusterMembershipService>();
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

    /// <summary>Generation → status of this cluster's rows, read straight from our table.</summary>
    private async Task<Dictionary<int, int>> StatusesInTableAsync()
    {
        await using var command = ClusteringTestDatabase.DataSource.CreateCommand($"SELECT generation, status FROM \"{_schema}\".membership WHERE cluster_id = $1");
        command.Parameters.Add(new Npgsql.NpgsqlParameter { Value = _clusterId });
        await using var reader = await command.ExecuteReaderAsync();
        var result = new Dictionary<int, int>();
        while (await reader.ReadAsync())
        {
            result.Add(reader.GetInt32(0), reader.GetInt32(1));
        }

        return result;
    }

}
