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
    public static async Task<IReadOnlyList<int>> MigrateAsync(SqlConnection connection, SqlServerCommandFactory commands, string schemaName, TimeSpan lockTimeout, CancellationToken cancellationToken)
    {
        var applied = new List<int>();
        using var transaction = connection.BeginTransaction(IsolationLevel.ReadCommitted);

        await using (var command = commands.MigrateLock("allocator-migrations:" + schemaName, schemaName, lockTimeout))
        {
            Bind(command, connection, transaction);
            await command.ExecuteNonQueryAsync(cancellationToken);
        }

        var done = new Dictionary<int, (string Name, string? Checksum)>();
        await using (var command = commands.MigrateVersions())
        {
            Bind(command, connection, transaction);
            await using var reader = await command.ExecuteReaderAsync(cancellationToken);
            while (await reader.ReadAsync(cancellationToken))
            {
                done[reader.GetInt32(0)] = (reader.GetString(1), reader.IsDBNull(2) ? null : reader.GetString(2));
            }
        }

        Verify(SqlScripts.Migrations, done);
        foreach (var migration in PendingMigrations(SqlScripts.Migrations, done.Keys.ToHashSet()))
        {
            await using (var command = commands.Migration(migration))
            {
                Bind(command, connection, transaction);
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            await using (var command = commands.MigrateRecord(migration))
            {
                Bind(command, connection, transaction);
                await command.ExecuteNonQueryAsync(cancellationToken);
            }

            applied.Add(migration.Version);
        }

        transaction.Commit();
        return applied;
    }

    /// <summary>
    /// An applied migration must still be the same file (name and checksum); a version this build
    /// does not know was applied by a newer build and is left alone.
    /// </summary>
    /// <exception cref="InvalidOperationException">An applied migration was edited or belongs to another line of migrations.</exception>
    internal static void Verify(IEnumerable<SqlMigration> all, IReadOnlyDictionary<int, (string Name, string? Checksum)> applied)
    {
        var byVersion = all.ToDictionary(m => m.Version);
        foreach (var (version, (name, checksum)) in applied.OrderBy(a => a.Key))
        {
            if (!byVersion.TryGetValue(version, out var embedded))
            {
                continue;
            }

            if (embedded.Name != name || checksum is null)
            {
                throw new InvalidOperationException(
                    $"The schema was migrated by another line of migrations: version {version} is recorded as '{name}', this build has '{embedded.Name}'. " +
                    "The pre-release migrations were squashed into 0001_baseline; recreate a pre-release schema.");
            }

            if (!string.Equals(checksum.Trim(), embedded.Checksum, StringComparison.OrdinalIgnoreCase))
            {
                throw new InvalidOperationException(
                    $"Migration {embedded.Name} was edited after it was applied (recorded checksum {checksum[..12]}…, file {embedded.Checksum[..12]}…). " +
                    "An applied migration never changes: restore it and put the change in a new migration.");
            }
        }
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
