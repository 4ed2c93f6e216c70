using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>Reads how the server replicates its commits (<c>replication.sql</c>, issue 48).</summary>
internal static class PostgresReplication
{
    public static async Task<StoreReplication> ReadAsync(PostgresStoreContext context, CancellationToken cancellationToken) =>
        await context.Retry.RunAsync(async ct =>
        {
            await using var command = context.Command("replication");
            await using var reader = await command.ExecuteReaderAsync(ct);
            List<(string? Name, string? State)> standbys = [];
            string commit = "on", names = "";
            while (await reader.ReadAsync(ct))
            {
                commit = reader.GetString(0);
                names = reader.GetString(1);
                if (reader.GetBoolean(4))
                {
                    standbys.Add((reader.IsDBNull(2) ? null : reader.GetString(2), reader.IsDBNull(3) ? null : reader.GetString(3)));
                }
            }

            return Interpret(commit, names, standbys);
        }, duplicateKeyIsTransient: false, cancellationToken);

    /// <summary>
    /// The weakest guarantee a commit gets: synchronous when it waits for a standby that has it
    /// (<c>sync</c>, or <c>quorum</c>), asynchronous when some standby only follows, none without
    /// standbys. A standby whose state is hidden (no <c>pg_read_all_stats</c>) is synchronous when
    /// the settings make commits wait for a named standby.
    /// </summary>
    internal static StoreReplication Interpret(string synchronousCommit, string synchronousStandbyNames, IReadOnlyList<(string? Name, string? State)> standbys)
    {
        var commitsWait = synchronousCommit is "on" or "remote_write" or "remote_apply" && !string.IsNullOrWhiteSpace(synchronousStandbyNames);
        List<string> described = [];
        List<string> followOnly = [];
        foreach (var (name, state) in standbys)
        {
            var shown = name is { Length: > 0 } ? name : "(hidden)";
            var waitedFor = commitsWait && (state is "sync" or "quorum" || state is null);
            described.Add($"{shown} ({state ?? "state hidden"})");
            if (!waitedFor)
            {
                followOnly.Add(shown);
            }
        }

        var mode = described.Count == 0 ? ReplicationMode.None
            : followOnly.Count == described.Count ? ReplicationMode.Asynchronous
            : ReplicationMode.Synchronous;
        return new StoreReplication(mode, described, followOnly);
    }
}
