using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>What one migrator run applied.</summary>
internal sealed record MigrationResult(IReadOnlyList<string> Migrations, IReadOnlyList<string> Functions);

/// <summary>
/// Brings a schema up to date, one migrator at a time per schema across instances (a session
/// advisory lock; the later ones find everything applied and do nothing):
/// <list type="number">
/// <item>refuses to go on when an applied migration's file was edited afterwards (checksums in
/// <c>schema_migrations</c>), naming it;</item>
/// <item>applies each pending migration in version order, each in its own transaction together
/// with its record, except a no-transaction migration (<see cref="Migration.NoTransaction"/>),
/// whose statements run one by one in autocommit and which is recorded after the last;</item>
/// <item>re-applies, in one transaction, every function file whose checksum differs from the one
/// recorded in <c>schema_functions</c>.</item>
/// </list>
/// </summary>
internal static class PostgresMigrator
{
    public static Task<MigrationResult> MigrateAsync(NpgsqlDataSource dataSource, string schema, CancellationToken cancellationToken) =>
        MigrateAsync(dataSource, schema, MigrationSet.Embedded, cancellationToken);

    public static async Task<MigrationResult> MigrateAsync(NpgsqlDataSource dataSource, string schema, MigrationSet set, CancellationToken cancellationToken)
    {
        var sql = new SqlScripts(schema);
        await using var connection = await dataSource.OpenConnectionAsync(cancellationToken);
        await LockAsync(connection, sql, schema, cancellationToken);
        try
        {
            await ExecuteAsync(connection, null, sql.Get("migrate_prepare"), cancellationToken);
            var (migrations, functions) = await ReadAppliedAsync(connection, sql, cancellationToken);
            Verify(set, migrations);

            var appliedMigrations = new List<string>();
            foreach (var migration in set.Migrations.Where(m => !migrations.ContainsKey(m.Version)))
            {
                if (migration.NoTransaction)
                {
                    foreach (var statement in migration.Statements())
                    {
                        await ExecuteAsync(connection, null, sql.Substitute(statement), cancellationToken);
                    }

                    await ExecuteAsync(connection, null, sql.Get("migrate_record"), cancellationToken, migration.Version, migration.Name, migration.Checksum);
                }
                else
                {
                    await using var transaction = await connection.BeginTransactionAsync(cancellationToken);
                    await ExecuteAsync(connection, transaction, sql.Substitute(migration.Text), cancellationToken);
                    await ExecuteAsync(connection, transaction, sql.Get("migrate_record"), cancellationToken, migration.Version, migration.Name, migration.Checksum);
                    await transaction.CommitAsync(cancellationToken);
                }

                appliedMigrations.Add(migration.Name);
            }

            var changed = set.Functions.Where(f => !functions.TryGetValue(f.Name, out var checksum) || checksum != f.Checksum).ToList();
            if (changed.Count > 0)
            {
                await using var transaction = await connection.BeginTransactionAsync(cancellationToken);
                foreach (var function in changed)
                {
                    await ExecuteAsync(connection, transaction, sql.Substitute(function.Text), cancellationToken);
                    await ExecuteAsync(connection, transaction, sql.Get("migrate_record_function"), cancellationToken, function.Name, function.Checksum);
                }

                await transaction.CommitAsync(cancellationToken);
            }

            return new MigrationResult(appliedMigrations, [.. changed.Select(f => f.Name)]);
        }
        finally
        {
            // Not cancellable: the lock must not stay with a pooled connection.
            if (connection.State == System.Data.ConnectionState.Open)
            {
                await ExecuteAsync(connection, null, sql.Get("migrate_unlock"), CancellationToken.None, schema);
            }
        }
    }

    /// <summary>Polls for the schema's migration lock (see migrate_lock.sql for why it does not wait inside the server).</summary>
    private static async Task LockAsync(NpgsqlConnection connection, SqlScripts sql, string schema, CancellationToken cancellationToken)
    {
        await using var command = new NpgsqlCommand(sql.Get("migrate_lock"), connection);
        command.Parameters.Add(new NpgsqlParameter { Value = schema });
        while (!(bool)(await command.ExecuteScalarAsync(cancellationToken))!)
        {
            await Task.Delay(TimeSpan.FromMilliseconds(Random.Shared.Next(50, 150)), cancellationToken);
        }
    }

    /// <summary>An applied migration must still be the same file: same name, same checksum.</summary>
    private static void Verify(MigrationSet set, IReadOnlyDictionary<int, (string Name, string? Checksum)> applied)
    {
        foreach (var (version, (name, checksum)) in applied.OrderBy(a => a.Key))
        {
            var embedded = set.Migrations.FirstOrDefault(m => m.Version == version);
            if (embedded is null)
            {
                // Applied by a newer build (a rolling upgrade): this build's functions still apply.
                continue;
            }

            if (embedded.Name != name || checksum is null)
            {
                throw new InvalidOperationException(
                    $"The schema was migrated by another line of migrations: version {version} is recorded as '{name}', this build has '{embedded.Name}'. " +
                    "Migrations 0001-0005 of the pre-release builds were squashed into 0001_baseline; recreate a pre-release schema (DROP SCHEMA … CASCADE).");
            }

            if (checksum != embedded.Checksum)
            {
                throw new InvalidOperationException(
                    $"Migration {embedded.Name} was edited after it was applied (recorded checksum {checksum[..12]}…, file {embedded.Checksum[..12]}…). " +
                    "An applied migration never changes: restore it and put the change in a new migration.");
            }
        }
    }

    private static async Task<(Dictionary<int, (string, string?)> Migrations, Dictionary<string, string> Functions)> ReadAppliedAsync(
        NpgsqlConnection connection, SqlScripts sql, CancellationToken cancellationToken)
    {
        var migrations = new Dictionary<int, (string, string?)>();
        var functions = new Dictionary<string, string>(StringComparer.Ordinal);
        await using var command = new NpgsqlCommand(sql.Get("migrate_versions"), connection);
        await using var reader = await command.ExecuteReaderAsync(cancellationToken);
        while (await reader.ReadAsync(cancellationToken))
        {
            if (reader.GetString(0) == "m")
            {
                migrations[reader.GetInt32(1)] = (reader.GetString(2), reader.IsDBNull(3) ? null : reader.GetString(3));
            }
            else
            {
                functions[reader.GetString(2)] = reader.GetString(3);
            }
        }

        return (migrations, functions);
    }

    private static async Task ExecuteAsync(NpgsqlConnection connection, NpgsqlTransaction? transaction, string text, CancellationToken cancellationToken, params object[] args)
    {
        await using var command = new NpgsqlCommand(text, connection, transaction) { CommandTimeout = 0 };
        foreach (var arg in args)
        {
            command.Parameters.Add(new NpgsqlParameter { Value = arg });
        }

        await command.ExecuteNonQueryAsync(cancellationToken);
    }
}
