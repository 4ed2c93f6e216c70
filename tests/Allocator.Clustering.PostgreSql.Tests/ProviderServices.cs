using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Orleans;
using Orleans.Configuration;
using Orleans.Hosting;
using Orleans.Messaging;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>
/// Orleans' own ADO.NET membership table and gateway list provider, resolved from a service
/// collection configured by <see cref="PostgresClusteringExtensions.UseAllocatorPostgresClustering(ISiloBuilder, Action{PostgresClusteringOptions})"/>
/// (and its client twin) exactly as a silo's would be, without starting a silo.
/// </summary>
internal sealed class ProviderServices : IAsyncDisposable
{
    private readonly ServiceProvider _services;

    private ProviderServices(ServiceProvider services) => _services = services;

    public IMembershipTable Table => _services.GetRequiredService<IMembershipTable>();

    public IGatewayListProvider Gateways => _services.GetRequiredService<IGatewayListProvider>();

    /// <summary>Builds the providers for one cluster; initializes them (reading orleansquery) when asked.</summary>
    public static async Task<ProviderServices> CreateAsync(string schema, string clusterId, bool initialize = true)
    {
        var services = new ServiceCollection();
        services.AddLogging();
        services.Configure<ClusterOptions>(o =>
        {
            o.ClusterId = clusterId;
            o.ServiceId = "allocator-tests";
        });
        services.AddOptions<GatewayOptions>();
        var configuration = new ConfigurationBuilder().Build();
        void Configure(PostgresClusteringOptions o)
        {
            o.ConnectionString = ClusteringTestDatabase.ConnectionString;
            o.Schema = schema;
        }

        ((ISiloBuilder)new Builder(services, configuration)).UseAllocatorPostgresClustering(Configure);
        ((IClientBuilder)new Builder(services, configuration)).UseAllocatorPostgresClustering(Configure);

        var provider = services.BuildServiceProvider(new ServiceProviderOptions { ValidateOnBuild = false, ValidateScopes = true });
        var result = new ProviderServices(provider);
        if (initialize)
        {
            await result.Table.InitializeMembershipTableAsync(true);
            await result.Gateways.InitializeGatewayListProvider();
        }

        return result;
    }

    public ValueTask DisposeAsync() => _services.DisposeAsync();

    /// <summary>The two builder shapes Orleans' extensions hang off, over a plain service collection.</summary>
    private sealed class Builder(IServiceCollection services, IConfiguration configuration) : ISiloBuilder, IClientBuilder
    {
        public IServiceCollection Services { get; } = services;

        public IConfiguration Configuration { get; } = configuration;
    }
}
