using Allocator.Grains;
using Allocator.Host.Cluster;
using Allocator.Networking;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// Allocates through the pool grain without HTTP: an Orleans silo (localhost clustering, a free
/// loopback port) runs in this process over the run's store, and every call is a grain call, so
/// concurrent callers are coalesced into store batches (group commit) exactly as the service
/// does; releases go through the grain too, and registrations through the registration batcher.
/// </summary>
internal sealed class PoolGrainDriver : IAllocationDriver
{
    private readonly IHost _silo;
    private readonly IGrainFactory _grains;

    private PoolGrainDriver(IHost silo)
    {
        _silo = silo;
        _grains = silo.Services.GetRequiredService<IGrainFactory>();
    }

    public string Name => "pool grain";

    public static async Task<IAllocationDriver> StartAsync(IWorkerStore store)
    {
        var builder = Microsoft.Extensions.Hosting.Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { EnvironmentName = "Production" });
        builder.Logging.SetMinimumLevel(LogLevel.Error);
        builder.Services.AddSingleton(store).AddSingleton(ChangeFeed.Of(store));
        var port = FreePort.Next();
        builder.UseOrleans(silo => silo
            .UseLocalhostClustering(siloPort: port, gatewayPort: 0, serviceId: "allocator-loadtests", clusterId: "allocator-loadtests")
            .AddAllocatorGrains()
            // As the host does: Orleans' dashboard when Allocator__OrleansDashboard__Enabled=true
            // (its grain-call profiling is then part of what is measured).
            .AddAllocatorOrleansDashboard(builder.Configuration));
        // As the host does: grain options from Allocator:Grains (e.g. Allocator__Grains__MaxBatchesInFlight=4).
        builder.Services.AddOptions<GrainOptions>().Bind(builder.Configuration.GetSection(GrainOptions.Section));
        var host = builder.Build();
        try
        {
            await host.StartAsync();
        }
        catch
        {
            host.Dispose();
            throw;
        }

        return new PoolGrainDriver(host);
    }

    public Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        _grains.GetPoolGrain(poolId).AllocateAsync(request, TimeSpan.Zero, cancellationToken);

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        _grains.GetPoolGrain(poolId).ReleaseAsync(allocationId, epoch, cancellationToken: cancellationToken);

    /// <summary>Through the pool's registration batcher, which upserts registrations arriving together in one statement.</summary>
    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        _grains.GetRegistrationBatcher(poolId).RegisterAsync(registration, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        await _silo.StopAsync();
        _silo.Dispose();
    }
}
