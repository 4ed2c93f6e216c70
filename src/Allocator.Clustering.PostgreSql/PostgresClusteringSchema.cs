namespace Allocator.Clustering.PostgreSql;

/// <summary>Prepares the PostgreSQL schema that holds Orleans cluster membership.</summary>
public static class PostgresClusteringSchema
{
    /// <summary>
    /// Creates the schema when missing, applies the migrations this build has and the database
    /// lacks (each once, under an advisory lock, so instances may call this at the same time), and
    /// writes the current query texts into <c>orleansquery</c>. A silo configured with
    /// <c>UseAllocatorPostgresClustering</c> does this itself when it starts; call it directly to
    /// prepare a database ahead of time (for example from a deployment step).
    /// </summary>
    /// <exception cref="ArgumentException">An option is missing or invalid.</exception>
    /// <exception cref="InvalidOperationException">
    /// An applied migration was edited, or the schema was migrated by a newer build. Nothing is changed.
    /// </exception>
    public static async Task EnsureCreatedAsync(PostgresClusteringOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        await ClusteringSchemaMigrator.MigrateAsync(options.ConnectionString!, options.Schema, ClusteringScripts.Embedded, cancellationToken);
    }
}
