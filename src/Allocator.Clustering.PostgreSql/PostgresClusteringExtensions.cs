using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Options;
using Orleans;
using Orleans.Configuration;
using Orleans.Hosting;
using Orleans.Runtime;

namespace Allocator.Clustering.PostgreSql;

/// <summary>
/// Cluster membership in PostgreSQL for Allocator's silos and clients, through Orleans' ADO.NET
/// clustering provider with our own schema and queries.
/// </summary>
public static class PostgresClusteringExtensions
{
    /// <summary>The ADO.NET invariant under which Orleans' provider loads Npgsql.</summary>
    private const string NpgsqlInvariant = "Npgsql";

    /// <summary>
    /// Keeps this silo's cluster membership in PostgreSQL: configures Orleans' ADO.NET clustering
    /// (invariant <c>Npgsql</c>, search path set to <see cref="PostgresClusteringOptions.Schema"/>)
    /// and prepares the schema when the silo starts, before membership is first read. Options are
    /// validated when the host starts.
    /// </summary>
    public static ISiloBuilder UseAllocatorPostgresClustering(this ISiloBuilder builder, Action<PostgresClusteringOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(builder);
        ArgumentNullException.ThrowIfNull(configure);

        AddOptions(builder.Services, configure);
        builder.Services.TryAddEnumerable(ServiceDescriptor.Singleton<ILifecycleParticipant<ISiloLifecycle>, ClusteringSchemaInitializer>());
        return builder.UseAdoNetClustering((OptionsBuilder<AdoNetClusteringSiloOptions> ado) =>
            ado.Configure<IOptions<PostgresClusteringOptions>>((provider, ours) =>
            {
                provider.Invariant = NpgsqlInvariant;
                provider.ConnectionString = ours.Value.ProviderConnectionString();
            }));
    }

    /// <summary>
    /// Lets an Orleans client find the cluster's gateways in PostgreSQL (active silos with a
    /// gateway port). A client never creates the schema: a silo of the cluster does.
    /// </summary>
    public static IClientBuilder UseAllocatorPostgresClustering(this IClientBuilder builder, Action<PostgresClusteringOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(builder);
        ArgumentNullException.ThrowIfNull(configure);

        AddOptions(builder.Services, configure);
        return builder.UseAdoNetClustering((OptionsBuilder<AdoNetClusteringClientOptions> ado) =>
            ado.Configure<IOptions<PostgresClusteringOptions>>((provider, ours) =>
            {
                provider.Invariant = NpgsqlInvariant;
                provider.ConnectionString = ours.Value.ProviderConnectionString();
            }));
    }

    private static void AddOptions(IServiceCollection services, Action<PostgresClusteringOptions> configure)
    {
        services.AddOptions<PostgresClusteringOptions>().Configure(configure).ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PostgresClusteringOptions>, PostgresClusteringOptionsValidator>());
    }

    private sealed class PostgresClusteringOptionsValidator : IValidateOptions<PostgresClusteringOptions>
    {
        public ValidateOptionsResult Validate(string? name, PostgresClusteringOptions options)
        {
            try
            {
                options.Validate();
                return ValidateOptionsResult.Success;
            }
            catch (ArgumentException ex)
            {
                return ValidateOptionsResult.Fail(ex.Message);
            }
        }
    }
}
