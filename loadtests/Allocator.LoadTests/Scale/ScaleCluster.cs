using Allocator.LoadTests.Audit;
using Allocator.LoadTests.Cli;
using Npgsql;

namespace Allocator.LoadTests.Scale;

/// <summary>
/// A PostgreSQL server the scale harness starts for itself (<c>eng/postgres.sh --name scale-…</c>,
/// .pg/scale-…/): its own processes, so that its CPU is exactly this run's database CPU. Stopped
/// when disposed if this run started it.
/// </summary>
internal sealed class ScaleCluster : IAsyncDisposable
{
    /// <summary>The name the first server's database takes in the service (<c>ConnectionStrings:Allocator</c>).</summary>
    public const string DefaultName = "default";

    private readonly LocalPostgres _server;

    private ScaleCluster(string name, LocalPostgres server)
    {
        Name = name;
        _server = server;
    }

    /// <summary>The database's name in the service: <c>default</c>, then <c>b</c>, <c>c</c>…</summary>
    public string Name { get; }

    public string ConnectionString => _server.ConnectionString;

    public int PostmasterPid => CpuTime.PostmasterOf(_server.DataDirectory);

    public static async Task<ScaleCluster> StartAsync(string script, int index, TextWriter progress, CancellationToken cancellationToken)
    {
        var server = await LocalPostgres.StartAsync(script, progress, cancellationToken, $"scale-{(char)('a' + index)}");
        await using (var connection = new NpgsqlConnection(server.ConnectionString))
        {
            await connection.OpenAsync(cancellationToken);
            foreach (var file in new[] { "track-functions.sql", "reload-configuration.sql" })
            {
                await using var command = new NpgsqlCommand(Sql(file), connection);
                await command.ExecuteNonQueryAsync(cancellationToken);
            }
        }

        return new ScaleCluster(index == 0 ? DefaultName : ((char)('a' + index)).ToString(), server);
    }

    public static string Sql(string file) => PostgresInvariantAudit.Load(file);

    public ValueTask DisposeAsync() => _server.DisposeAsync();
}
