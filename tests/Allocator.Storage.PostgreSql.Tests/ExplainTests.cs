using System.Text.Json;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

public sealed class ExplainTests : PostgresStoreTestBase
{
    [Fact]
    public async Task PickQuery_On100000Workers_SeeksTheScoreIndexWithoutSorting()
    {
        await Store.UpsertPoolAsync("big", PoolSettings.Default);
        await Store.UpsertPoolAsync("other", PoolSettings.Default);
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'big', 'w' || lpad(g::text, 6, '0'), 'h:' || g, 100, g % 100 FROM generate_series(1, 100000) g;
            INSERT INTO "{Schema}".workers (pool_id, worker_id, address, capacity, load)
            SELECT 'other', 'o' || g, 'h:' || g, 100, 0 FROM generate_series(1, 1000) g;
            ANALYZE "{Schema}".workers;
            """);

        await using var command = PostgresTestDatabase.DataSource.CreateCommand("EXPLAIN (FORMAT JSON) " + Store.Sql.Get("pick_candidate"));
        command.Parameters.Add(new NpgsqlParameter { Value = "big" });
        command.Parameters.Add(new NpgsqlParameter { Value = DateTimeOffset.MinValue.UtcDateTime.AddYears(1) });
        command.Parameters.Add(new NpgsqlParameter { Value = 1 });
        command.Parameters.Add(new NpgsqlParameter { Value = Array.Empty<string>() });
        var json = (string)(await command.ExecuteScalarAsync())!;

        var nodes = new List<JsonElement>();
        Collect(JsonDocument.Parse(json).RootElement[0].GetProperty("Plan"), nodes);
        var types = nodes.Select(n => n.GetProperty("Node Type").GetString()).ToList();
        types.Should().NotContain("Sort", $"the ORDER BY must be read from the index, plan: {string.Join(" > ", types)}");
        nodes.Should().Contain(n => n.GetProperty("Node Type").GetString() == "Index Scan"
            && n.GetProperty("Index Name").GetString() == "workers_pick", $"plan: {json}");
    }

    private static void Collect(JsonElement node, List<JsonElement> into)
    {
        into.Add(node);
        if (node.TryGetProperty("Plans", out var children))
        {
            foreach (var child in children.EnumerateArray())
            {
                Collect(child, into);
            }
        }
    }
}
