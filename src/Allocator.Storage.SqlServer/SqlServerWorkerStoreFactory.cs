using Allocator.Storage.SqlServer.Internal;
using Microsoft.Data.SqlClient;

namespace Allocator.Storage.SqlServer;

/// <summary>Creates the SQL Server worker store: validates options, connects, migrates.</summary>
/// <example>
/// <code>
/// IWorkerStore store = await SqlServerWorkerStoreFactory.CreateAsync(new SqlServerWorkerStoreOptions
/// {
///     ConnectionString = configuration.GetConnectionString("Allocator")!,
/// });
/// </code>
/// The store also implements <see cref="IAsyncDisposable"/> (it stops its change poller).
/// </example>
public static class SqlServerWorkerStoreFactory
{
    /// <summary>
    /// Validates <paramref name="options"/>, opens a first connection with a short connect timeout
    /// (<see cref="SqlServerWorkerStoreOptions.StartupConnectTimeout"/>) so that an unreachable
    /// server fails start-up fast with a message naming <c>ConnectionStrings:Allocator</c>, applies
    /// the embedded migrations under an application lock, and returns the store.
    /// </summary>
    /// <exception cref="ArgumentException">The options are invalid.</exception>
    /// <exception cref="InvalidOperationException">The server cannot be reached or the migration failed.</exception>
    public static async Task<IWorkerStore> CreateAsync(SqlServerWorkerStoreOptions options, TimeProvider? timeProvider = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.EnsureValid();

        SqlConnectionStringBuilder builder;
        try
        {
            builder = new SqlConnectionStringBuilder(options.ConnectionString);
        }
        catch (ArgumentException ex)
        {
            throw new ArgumentException($"The SQL Server connection string ({SqlServerWorkerStoreOptions.ConnectionStringSetting}) is malformed: {ex.Message}", nameof(options), ex);
        }

        var store = new SqlServerWorkerStore(options, timeProvider);
        var startup = new SqlConnectionStringBuilder(builder.ConnectionString)
        {
            ConnectTimeout = Math.Max(1, (int)options.StartupConnectTimeout.TotalSeconds),
            Pooling = false,
        };

        SqlConnection connection;
        try
        {
            connection = new SqlConnection(startup.ConnectionString);
            await connection.OpenAsync(cancellationToken);
        }
        catch (Exception ex) when (ex is NotSupportedException or System.Globalization.CultureNotFoundException)
        {
            throw new InvalidOperationException(
                "Microsoft.Data.SqlClient cannot open a connection in globalization-invariant mode: set " +
                "<InvariantGlobalization>false</InvariantGlobalization> in the executable that uses the SQL Server store " +
                "(see docs/sqlserver.md).", ex);
        }
        catch (Exception ex) when (ex is SqlException or InvalidOperationException)
        {
            // Names the setting and the target, never the credentials.
            throw new InvalidOperationException(
                $"Cannot connect to SQL Server '{builder.DataSource}' (database '{builder.InitialCatalog}') configured by " +
                $"{SqlServerWorkerStoreOptions.ConnectionStringSetting}: {ex.Message}", ex);
        }

        await using (connection)
        {
            try
            {
                await SqlServerMigrator.MigrateAsync(connection, store.Commands, options.Schema, options.CommandTimeout / 2, cancellationToken);
            }
            catch (SqlException ex)
            {
                throw new InvalidOperationException($"Migrating the SQL Server schema [{options.Schema}] failed (error {ex.Number}): {ex.Message}", ex);
            }
        }

        return store;
    }
}
