using Npgsql;

namespace Allocator.Storage.PostgreSql;

/// <summary>
/// Applies the embedded migrations in version order, each once, recording applied versions in
/// <c>schema_migrations</c>. All of it runs in one transaction under a transaction-scoped
/// advisory lock keyed by the schema name, so instances starting at once queue up: the first
/// applies, the others find everything recorded and do nothing.
/// </summary>
internal static class SchemaMigrator
{
    public static async Task<int> MigrateAsync(NpgsqlDataSource dataSource, string schema, CancellationToken cancellationToken)
    {
        var scripts = new SqlScripts(schema);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken);
        await using var transaction = await connection.BeginTransactionAsync(cancellationToken);

        await using (var command = new NpgsqlCommand("SELECT pg_advisory_xact_lock(hashtext('allocator.migrate'), hashtext($1))", connection, transaction))
        {
            command.Parameters.Add(new NpgsqlParameter { Value = schema });
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        // IF NOT EXISTS still races on the catalog without the lock above; with it, it is just idempotent.
        await using (var command = new NpgsqlCommand(scripts.Substitute(
            "CREATE SCHEMA IF NOT EXISTS {schema}; " +
            "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"),
            connection, transaction))
        {
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        var applied = new HashSet<int>();
        await using (var command = new NpgsqlCommand(scripts.Substitute("SELECT version FROM {schema}.schema_migrations"), connection, transaction))
        await using (var reader = await command.ExecuteReaderAsync(cancellationToken))
        {
            while (await reader.ReadAsync(cancellationToken))
            {
                applied.Add(reader.GetInt32(0));
            }
        }

        var count = 0;
        foreach (var (version, name, sql) in scripts.Migrations())
        {
            if (applied.Contains(version))
            {
                continue;
            }

            await using (var command = new NpgsqlCommand(sql, connection, transaction))
            {
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            await using (var command = new NpgsqlCommand(scripts.Substitute("INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)"), connection, transaction))
            {
                command.Parameters.Add(new NpgsqlParameter { Value = version });
                command.Parameters.Add(new NpgsqlParameter { Value = name });
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            count++;
        }

        await transaction.CommitAsync(cancellationToken);
        return count;
    }
}
