using Npgsql;

namespace Allocator.Clustering.PostgreSql.Tests;

/// <summary>
/// The test cluster from <c>ALLOCATOR_POSTGRES</c> and fresh schemas. A missing variable fails the
/// test (never a skip): CI must not go green without PostgreSQL.
/// </summary>
internal static class ClusteringTestDatabase
{
    public const string Variable = "ALLOCATOR_POSTGRES";

    private static readonly Lazy<NpgsqlDataSource> Shared = new(() => NpgsqlDataSource.Create(ConnectionString));

    public static string ConnectionString =>
        Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException(
                $"Environment variable {Variable} is not set. Start PostgreSQL with eng/postgres.sh and export its connection string, " +
                "e.g. ALLOCATOR_POSTGRES=\"Host=127.0.0.1;Port=55432;Username=postgres;Database=allocator\".");

    /// <summary>For the tests' own checks (plain connection string: every statement names its schema).</summary>
    public static NpgsqlDataSource DataSource => Shared.Value;

    /// <summary>A schema name no other test uses (lower case, as the options require).</summary>
    public static string NewSchema() => "c_" + Guid.NewGuid().ToString("N")[..16];

    public static PostgresClusteringOptions Options(string schema) => new() { ConnectionString = ConnectionString, Schema = schema };

    public static async Task DropSchemaAsync(string schema)
    {
        await using var command = DataSource.CreateCommand($"DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        await command.ExecuteNonQueryAsync();
    }

    public static async Task<T?> ScalarAsync<T>(string sql, params object[] args)
    {
        await using var command = DataSource.CreateCommand(sql);
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        var value = await command.ExecuteScalarAsync();
        return value is null or DBNull ? default : (T)value;
    }

    public static async Task<int> ExecuteAsync(string sql, params object[] args)
    {
        await using var command = DataSource.CreateCommand(sql);
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        return await command.ExecuteNonQueryAsync();
    }
}

/// <summary>A schema prepared by <see cref="PostgresClusteringSchema.EnsureCreatedAsync"/>, one per test class, dropped afterwards.</summary>
public sealed class ClusteringSchemaFixture : IAsyncLifetime
{
    public string Schema { get; } = ClusteringTestDatabase.NewSchema();

    public Task InitializeAsync() => PostgresClusteringSchema.EnsureCreatedAsync(ClusteringTestDatabase.Options(Schema));

    public Task DisposeAsync() => ClusteringTestDatabase.DropSchemaAsync(Schema);
}
