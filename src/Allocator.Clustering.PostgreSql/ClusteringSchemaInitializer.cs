using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans;
using Orleans.Runtime;

namespace Allocator.Clustering.PostgreSql;

/// <summary>
/// Prepares the clustering schema when the silo starts, at the very first lifecycle stage. Orleans
/// first touches the membership table at <see cref="ServiceLifecycleStage.RuntimeGrainServices"/>
/// (its membership table manager initializes the provider there, which reads <c>orleansquery</c>),
/// so the schema and its queries exist before that read.
/// </summary>
internal sealed partial class ClusteringSchemaInitializer(
    IOptions<PostgresClusteringOptions> options,
    ILogger<ClusteringSchemaInitializer> logger) : ILifecycleParticipant<ISiloLifecycle>
{
    public void Participate(ISiloLifecycle lifecycle) =>
        lifecycle.Subscribe(nameof(ClusteringSchemaInitializer), ServiceLifecycleStage.First, StartAsync);

    private async Task StartAsync(CancellationToken cancellationToken)
    {
        var settings = options.Value;
        var result = await ClusteringSchemaMigrator.MigrateAsync(settings.ConnectionString!, settings.Schema, ClusteringScripts.Embedded, cancellationToken);
        LogSchemaReady(settings.Schema, result.MigrationsApplied, result.QueriesUpdated);
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Cluster membership schema '{Schema}' ready: {MigrationsApplied} migration(s) applied, {QueriesUpdated} query text(s) written.")]
    private partial void LogSchemaReady(string schema, int migrationsApplied, int queriesUpdated);
}
