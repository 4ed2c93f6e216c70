using System.Text.Json;
using Npgsql;

namespace Allocator.Storage.PostgreSql.Tests;

/// <summary>
/// The purge's work must follow what it removes, not how long the history has been purged
/// (issue 24): a history that was purged, vacuumed and filled again stores new rows in the pages
/// old ones left, in no time order.
/// </summary>
public sealed class HistoryPurgeTests : PostgresStoreTestBase
{
    private const int RowsPerHour = 2_000;
    private const int Batch = 1_000;

    [Fact]
    public async Task Purge_AfterHoursOfPurgingAndRefilling_ReadsOnlyTheRowsItRemoves()
    {
        // Hours 0..5 of history ended 7..2 h ago (each within the first 50 minutes of its hour),
        // inserted in time order as releases do.
        for (var hour = 0; hour < 6; hour++)
        {
            await InsertHourAsync(hour, endedHoursAgo: 7 - hour);
        }

        // Four hours of the service's life: the oldest hour purged, the table vacuumed (as
        // autovacuum does after a purge), an hour of new releases stored in the freed pages.
        for (var hour = 0; hour < 4; hour++)
        {
            await PurgeAsync(retentionHoursAgo: 6 - hour);
            await PostgresTestDatabase.ExecuteAsync($"""VACUUM "{Schema}".allocation_history""");
            await InsertHourAsync(100 + hour, endedHoursAgo: 1);
        }

        // The next hour's first batch. Before 0009 it read the refilled pages first: at this
        // size the planner scanned the table (6,124 rows read and dropped for 1,000 removed); at
        // millions of rows the BRIN index matched every range the purge had emptied and new rows
        // refilled ("from hours ago until now"), one more hour of history reread per hour purged
        // (docs/benchmarks/history/2026-11-25-history-at-scale.md).
        var plan = await ExplainPurgeAsync(retentionHoursAgo: 2);

        var nodes = new List<JsonElement>();
        Collect(plan, nodes);
        var limit = nodes.First(n => n.GetProperty("Node Type").GetString() == "Limit");
        limit.GetProperty("Actual Rows").GetInt64().Should().Be(Batch, "the batch finds a full batch of old rows");
        var discarded = nodes.Sum(n => Count(n, "Rows Removed by Index Recheck") + Count(n, "Rows Removed by Filter"));
        discarded.Should().BeLessThan(Batch / 10, $"a batch reads the rows it removes, not the history that replaced older ones: {plan}");
    }

    private async Task InsertHourAsync(int hour, int endedHoursAgo) =>
        await PostgresTestDatabase.ExecuteAsync($"""
            INSERT INTO "{Schema}".allocation_history
            SELECT gen_random_uuid(), 'p', 'w', 'h:1', 'key-{hour}-' || g, 1, g, e, NULL, e, 'released'
              FROM generate_series(1, {RowsPerHour}) g,
                   LATERAL (SELECT now() - interval '{endedHoursAgo} hours' + g * interval '1.5 seconds' AS e) t
            """);

    private async Task PurgeAsync(int retentionHoursAgo)
    {
        while (true)
        {
            await using var command = PostgresTestDatabase.DataSource.CreateCommand(Store.Sql.Get("purge_history"));
            command.Parameters.Add(new NpgsqlParameter { Value = (long)TimeSpan.FromHours(retentionHoursAgo).TotalMilliseconds - 300_000 });
            command.Parameters.Add(new NpgsqlParameter { Value = Batch });
            if (await command.ExecuteNonQueryAsync() < Batch)
            {
                return;
            }
        }
    }

    private async Task<JsonElement> ExplainPurgeAsync(int retentionHoursAgo)
    {
        await using var connection = await PostgresTestDatabase.DataSource.OpenConnectionAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await using var command = new NpgsqlCommand("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + Store.Sql.Get("purge_history"), connection, transaction);
        command.Parameters.Add(new NpgsqlParameter { Value = (long)TimeSpan.FromHours(retentionHoursAgo).TotalMilliseconds - 300_000 });
        command.Parameters.Add(new NpgsqlParameter { Value = Batch });
        var json = (string)(await command.ExecuteScalarAsync())!;
        await transaction.RollbackAsync();
        return JsonDocument.Parse(json).RootElement[0].GetProperty("Plan").Clone();
    }

    private static long Count(JsonElement node, string property) =>
        node.TryGetProperty(property, out var value) ? value.GetInt64() : 0;

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
