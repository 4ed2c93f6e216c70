using Npgsql;

namespace Allocator.Clustering.PostgreSql;

/// <summary>What one migrator run changed.</summary>
internal readonly record struct ClusteringMigrationResult(int MigrationsApplied, int QueriesUpdated);

/// <summary>
/// Prepares a clustering schema: creates it, applies the numbered migrations not yet recorded in
/// <c>schema_migrations</c> (each once, with its checksum), then upserts every query text into
/// <c>orleansquery</c>, so an edited query file takes effect at the next start.
/// <para>
/// All of it runs in one transaction under a transaction-scoped advisory lock keyed by the schema
/// name: instances starting at once queue up, the first does the work, the others find it done.
/// It refuses to run (throws, changing nothing) when an applied migration's file was edited, or
/// when the database records a migration this build does not know: an older build would otherwise
/// write its older query texts over the newer ones.
/// </para>
/// </summary>
internal static class ClusteringSchemaMigrator
{
    public static async Task<ClusteringMigrationResult> MigrateAsync(
        string connectionString, string schema, ClusteringScripts scripts, CancellationToken cancellationToken)
    {
        var quoted = ClusteringSchemaName.Quote(schema);
        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var transaction = await connection.BeginTransactionAsync(cancellationToken);

        await using (var command = new NpgsqlCommand("SELECT pg_advisory_xact_lock(hashtext('allocator.clustering.migrate'), hashtext($1))", connection, transaction))
        {
            command.Parameters.Add(new NpgsqlParameter { Value = schema });
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        // IF NOT EXISTS still races on the catalog without the lock above; with it, it is just idempotent.
        await using (var command = new NpgsqlCommand(
            $"CREATE SCHEMA IF NOT EXISTS {quoted}; " +
            $"CREATE TABLE IF NOT EXISTS {quoted}.schema_migrations (" +
            "version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            connection, transaction))
        {
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        var applied = new Dictionary<int, (string Name, string Checksum)>();
        await using (var command = new NpgsqlCommand($"SELECT version, name, checksum FROM {quoted}.schema_migrations", connection, transaction))
        await using (var reader = await command.ExecuteReaderAsync(cancellationToken))
        {
            while (await reader.ReadAsync(cancellationToken))
            {
                applied.Add(reader.GetInt32(0), (reader.GetString(1), reader.GetString(2)));
            }
        }

        CheckAppliedMigrations(schema, scripts, applied);

        var count = 0;
        foreach (var migration in scripts.Migrations)
        {
            if (applied.ContainsKey(migration.Version))
            {
                continue;
            }

            await using (var command = new NpgsqlCommand(migration.Sql.Replace("{schema}", quoted, StringComparison.Ordinal), connection, transaction))
            {
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            await using (var command = new NpgsqlCommand($"INSERT INTO {quoted}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", connection, transaction))
            {
                command.Parameters.Add(new NpgsqlParameter { Value = migration.Version });
                command.Parameters.Add(new NpgsqlParameter { Value = migration.Name });
                command.Parameters.Add(new NpgsqlParameter { Value = migration.Checksum });
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            count++;
        }

        // Only texts that differ are written, so a start with nothing changed writes nothing.
        int updated;
        await using (var command = new NpgsqlCommand(
            $"WITH changed AS (INSERT INTO {quoted}.orleansquery AS q (querykey, querytext) " +
            "SELECT * FROM unnest($1::text[], $2::text[]) " +
            "ON CONFLICT (querykey) DO UPDATE SET querytext = EXCLUDED.querytext WHERE q.querytext IS DISTINCT FROM EXCLUDED.querytext " +
            "RETURNING 1) SELECT count(*)::integer FROM changed",
            connection, transaction))
        {
            command.Parameters.Add(new NpgsqlParameter { Value = scripts.Queries.Keys.ToArray() });
            command.Parameters.Add(new NpgsqlParameter { Value = scripts.Queries.Values.ToArray() });
            updated = (int)(await command.ExecuteScalarAsync(cancellationToken))!;
        }

        await transaction.CommitAsync(cancellationToken);
        return new ClusteringMigrationResult(count, updated);
    }

    private static void CheckAppliedMigrations(string schema, ClusteringScripts scripts, Dictionary<int, (string Name, string Checksum)> applied)
    {
        var known = scripts.Migrations.ToDictionary(m => m.Version);
        foreach (var (version, (name, checksum)) in applied.OrderBy(a => a.Key))
        {
            if (!known.TryGetValue(version, out var migration))
            {
                throw new InvalidOperationException(
                    $"Clustering schema '{schema}' records migration {version} ({name}), which this build does not have " +
                    $"(it knows up to {(scripts.Migrations.Count == 0 ? 0 : scripts.Migrations[^1].Version)}). " +
                    "A newer build has migrated this schema; run that build, or a newer one.");
            }

            if (!string.Equals(migration.Checksum, checksum, StringComparison.Ordinal))
            {
                throw new InvalidOperationException(
                    $"Clustering migration {version} ({name}) was applied to schema '{schema}' with checksum {checksum}, " +
                    $"but this build's file {migration.Name}.sql has checksum {migration.Checksum}. " +
                    "An applied migration must never be edited: restore the file and add the change as a new numbered migration.");
            }
        }
    }
}
