using Npgsql;

namespace Allocator.Clustering.PostgreSql;

/// <summary>
/// Where Orleans cluster membership lives in PostgreSQL. Every default is documented on its
/// property; <see cref="Validate"/> runs when the silo starts and when the schema is prepared.
/// </summary>
public sealed class PostgresClusteringOptions
{
    /// <summary>The schema used when none is set: <c>allocator_cluster</c>.</summary>
    public const string DefaultSchema = "allocator_cluster";

    /// <summary>
    /// Npgsql connection string of the database holding the membership schema (typically the
    /// allocator's own database). Any <c>Search Path</c> in it is replaced by <see cref="Schema"/>.
    /// Required; default: none.
    /// </summary>
    public string? ConnectionString { get; set; }

    /// <summary>
    /// Schema holding the membership tables and queries. Several clusters (or test runs) can share
    /// one database with one schema each; one schema can also hold several clusters, told apart by
    /// Orleans' <c>ClusterId</c>. A lower-case identifier (<c>[a-z_][a-z0-9_]*</c>, at most 63
    /// characters, not starting with <c>pg_</c>). Default: <see cref="DefaultSchema"/>.
    /// </summary>
    public string Schema { get; set; } = DefaultSchema;

    /// <summary>Throws <see cref="ArgumentException"/> when an option is missing or out of range.</summary>
    public void Validate()
    {
        if (string.IsNullOrWhiteSpace(ConnectionString))
        {
            throw new ArgumentException("PostgresClusteringOptions.ConnectionString is required.", nameof(ConnectionString));
        }

        try
        {
            _ = new NpgsqlConnectionStringBuilder(ConnectionString);
        }
        catch (ArgumentException)
        {
            // Not chained: the parser's message can quote the string, password included.
            throw new ArgumentException("PostgresClusteringOptions.ConnectionString is not a valid Npgsql connection string.", nameof(ConnectionString));
        }

        ClusteringSchemaName.Validate(Schema);
    }

    /// <summary>
    /// The connection string Orleans' provider uses: the configured one with the search path set to
    /// the schema alone, because the provider's bootstrap query names <c>OrleansQuery</c>
    /// unqualified and our query texts name our tables unqualified.
    /// </summary>
    internal string ProviderConnectionString()
    {
        Validate();
        var builder = new NpgsqlConnectionStringBuilder(ConnectionString) { SearchPath = Schema };
        return builder.ConnectionString;
    }
}
