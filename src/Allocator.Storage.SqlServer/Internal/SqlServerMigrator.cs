using System.Data;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// Applies the embedded migrations in version order, in one transaction that holds an
/// application lock on the schema (<c>sp_getapplock</c>), so instances starting together migrate
/// one at a time and the later ones find nothing to do. Applied versions are recorded in
/// <c>schema_migrations</c>; every script is also guarded on its own.
/// </summary>
internal static class SqlServerMigrator
{
    public static async Task<IReadOnlyList<int>> MigrateAsync(SqlConnection connection, CommandFactory commands, string schemaName, TimeSpan lockTimeout, CancellationToken cancellationToken)
    {
        var applied = new List<int>();
        using var transaction = connection.BeginTransaction(IsolationLevel.ReadCommitted);

        await using (var command = commands.MigrateLock("allocator-migrations:" + schemaName, schemaName, lockTimeout))
        {
            Bind(command, connection, transaction);
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        var done = new HashSet<int>();
        await using (var command = commands.MigrateVersions())
        {
            Bind(command, connection, transaction);
            await using var reader = await command.ExecuteReaderAsync(cancellationToken);
            while (await reader.ReadAsync(cancellationToken))
            {
                done.Add(reader.GetInt32(0));
            }
        }

        foreach (var migration in PendingMigrations(SqlScripts.Migrations, done))
        {
            await using (var command = commands.Migration(migration))
            {
                Bind(command, connection, transaction);
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            await using (var command = commands.MigrateRecord(migration.Version, migration.Name))
            {
                Bind(command, connection, transaction);
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            applied.Add(migration.Version);
        }

        transaction.Commit();
        return applied;
    }

    /// <summary>The migrations not yet applied, in ascending version order.</summary>
    internal static IEnumerable<SqlMigration> PendingMigrations(IEnumerable<SqlMigration> all, IReadOnlySet<int> applied) =>
        all.Where(m => !applied.Contains(m.Version)).OrderBy(m => m.Version);

    private static void Bind(SqlCommand command, SqlConnection connection, SqlTransaction transaction)
    {
        command.Connection = connection;
        command.Transaction = transaction;
    }
}
