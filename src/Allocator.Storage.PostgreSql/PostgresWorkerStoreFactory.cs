using Npgsql;

namespace Allocator.Storage.PostgreSql;

/// <summary>Creates PostgreSQL worker stores. The returned store is also <see cref="IAsyncDisposable"/> (it owns a LISTEN connection once subscribed).</summary>
public static class PostgresWorkerStoreFactory
{
    /// <summary>
    /// Creates a store over a data source owned by the caller (e.g. one built with multiplexing;
    /// notifications then need a data source without multiplexing, see remarks in docs/postgresql.md).
    /// Build it with <c>No Reset On Close=true</c> unless other code changes session state on its
    /// connections: the default reset discards the store's cached plans on every call.
    /// Applies the migrations unless <see cref="PostgresWorkerStoreOptions.ApplyMigrations"/> is false.
    /// </summary>
    public static Task<IWorkerStore> CreateAsync(NpgsqlDataSource dataSource, PostgresWorkerStoreOptions? options = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        return CreateCoreAsync(dataSource, options ?? new PostgresWorkerStoreOptions(), ownsDataSource: false, cancellationToken);
    }

    /// <summary>Creates a store with its own data source built from <see cref="PostgresWorkerStoreOptions.ConnectionString"/>.</summary>
    public static Task<IWorkerStore> CreateAsync(PostgresWorkerStoreOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        if (string.IsNullOrWhiteSpace(options.ConnectionString))
        {
            throw new ArgumentException("ConnectionString is required when no data source is given.", nameof(options));
        }

        return CreateCoreAsync(BuildDataSource(options.ConnectionString), options, ownsDataSource: true, cancellationToken);
    }

    /// <summary>
    /// The data source a store builds for itself: Npgsql's defaults, except that a connection
    /// returned to the pool is not reset, unless the connection string says otherwise.
    /// </summary>
    /// <remarks>
    /// Npgsql resets a pooled connection with <c>DISCARD ALL</c> before its next use, and that
    /// drops every cached plan of the session, PL/pgSQL's included: each call of
    /// <c>allocate_batch</c> then planned all of its statements again. Measured at storm-90 with
    /// single allocations: one <c>DISCARD ALL</c> and one extra transaction per allocation, about
    /// 2 ms of database CPU each. The store leaves no session state to reset: lock timeouts are
    /// transaction-local (<c>set_config(..., true)</c>) and LISTEN has its own connection.
    /// </remarks>
    internal static NpgsqlDataSource BuildDataSource(string connectionString)
    {
        var builder = new NpgsqlDataSourceBuilder(connectionString);
        var given = new System.Data.Common.DbConnectionStringBuilder { ConnectionString = connectionString };
        if (!given.ContainsKey("No Reset On Close") && !given.ContainsKey("NoResetOnClose"))
        {
            builder.ConnectionStringBuilder.NoResetOnClose = true;
        }

        return builder.Build();
    }

    /// <summary>Applies the embedded migrations to <paramref name="schema"/>; safe to run from several instances at once.</summary>
    /// <returns>How many migrations this call applied.</returns>
    public static Task<int> MigrateAsync(NpgsqlDataSource dataSource, string schema = "allocator", CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(dataSource);
        SchemaName.Validate(schema);
        return SchemaMigrator.MigrateAsync(dataSource, schema, cancellationToken);
    }

    private static async Task<IWorkerStore> CreateCoreAsync(NpgsqlDataSource dataSource, PostgresWorkerStoreOptions options, bool ownsDataSource, CancellationToken cancellationToken)
    {
        options.Validate();
        try
        {
            if (options.ApplyMigrations)
            {
                await SchemaMigrator.MigrateAsync(dataSource, options.Schema, cancellationToken);
            }

            var store = new PostgresWorkerStore(dataSource, options, ownsDataSource);
            if (options.ListenForChanges)
            {
                // Listen before returning, so a change made right after the first subscription
                // is not missed. If the connection cannot be opened in time, the listener keeps
                // retrying in the background; the store works without it.
                try
                {
                    await store.WaitForListenerAsync(cancellationToken).WaitAsync(options.LockTimeout + TimeSpan.FromSeconds(3), cancellationToken);
                }
                catch (TimeoutException)
                {
                    // Keep going: notifications start once the listener connects.
                }
            }

            return store;
        }
        catch when (ownsDataSource)
        {
            await dataSource.DisposeAsync();
            throw;
        }
    }
}
