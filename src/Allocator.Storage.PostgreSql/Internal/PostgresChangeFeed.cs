using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// LISTENs on the schema's channel over one dedicated connection, started when the store is
/// created (or by the first subscription), and reopens it after a drop (notifications sent while it was down are lost;
/// waiters re-check on their own deadline). Payload: <c>pool id ':' kind</c> (c = capacity, s = settings).
/// </summary>
/// <param name="poolIdsSql">Lists every pool id (get_pool_ids.sql), for the catch-up after a reconnect.</param>
internal sealed class PostgresChangeFeed(NpgsqlDataSource dataSource, string channel, PostgresWorkerStoreOptions options, TimeProvider time, Action<PoolChanged> storeHandler, string poolIdsSql) : IAsyncDisposable
{
    private int _disposed;

    private readonly object _sync = new();
    private readonly CancellationTokenSource _stop = new();
    private readonly TaskCompletionSource _listening = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private Action<PoolChanged>[] _handlers = [];
    private Task? _loop;
    private NpgsqlDataSource? _ownedListenSource;

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        lock (_sync)
        {
            _handlers = [.. _handlers, handler];
            _loop ??= Task.Run(() => RunAsync(_stop.Token), CancellationToken.None);
        }

        return new Subscription(this, handler);
    }

    public Task WaitUntilListeningAsync(CancellationToken cancellationToken)
    {
        lock (_sync)
        {
            _loop ??= Task.Run(() => RunAsync(_stop.Token), CancellationToken.None);
        }

        return _listening.Task.WaitAsync(cancellationToken);
    }

    public async ValueTask DisposeAsync()
    {
        // Disposal may come from the container and from an owner; only the first one acts.
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _stop.CancelAsync();
        if (_loop is not null)
        {
            try
            {
                await _loop;
            }
            catch (OperationCanceledException)
            {
                // Stopping.
            }
        }

        _stop.Dispose();
        if (_ownedListenSource is not null)
        {
            await _ownedListenSource.DisposeAsync();
        }
    }

    private async Task RunAsync(CancellationToken stop)
    {
        var connectedBefore = false;
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await using var connection = await ListenSource().OpenConnectionAsync(stop);
                connection.Notification += (_, e) => Dispatch(e.Payload);
                await using (var command = new NpgsqlCommand("LISTEN \"" + channel.Replace("\"", "\"\"", StringComparison.Ordinal) + "\"", connection) { CommandTimeout = PostgresStoreContext.DriverCommandTimeout })
                using (var deadline = new StatementDeadline(options.CommandTimeout, TimeProvider.System, stop))
                {
                    await command.ExecuteNonQueryAsync(deadline.Token);
                }

                _listening.TrySetResult();
                if (connectedBefore)
                {
                    // What was notified while the connection was down is lost: tell every pool
                    // that capacity and settings may have changed, so waiters re-check and caches reload.
                    await CatchUpAsync(connection, stop);
                }

                connectedBefore = true;
                while (true)
                {
                    // Quiet for a keepalive period: ping, so a half-open connection (a peer that
                    // vanished without a FIN) fails here and is reopened, instead of silently
                    // delivering nothing.
                    if (!await connection.WaitAsync(options.ListenKeepAlive, stop))
                    {
                        await using var ping = new NpgsqlCommand("SELECT 1", connection) { CommandTimeout = PostgresStoreContext.DriverCommandTimeout };
                        using var deadline = new StatementDeadline(options.ListenKeepAlive, TimeProvider.System, stop);
                        await ping.ExecuteScalarAsync(deadline.Token);
                    }
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                return;
            }
            catch (Exception)
            {
                // Any failure of this background loop (dropped connection, server restart, bad
                // configuration) is retried; the store's own operations report their errors.
                // The connection dropped or could not be opened: try again after a pause.
                await Task.Delay(options.ListenReconnectDelay, time, stop).ContinueWith(_ => { }, TaskScheduler.Default);
            }
        }
    }

    /// <summary>
    /// LISTEN needs a physical connection of its own; a multiplexing data source cannot give
    /// one, so the listener then uses <see cref="PostgresWorkerStoreOptions.ListenDataSource"/>
    /// or a small non-multiplexing source built from the same connection string.
    /// </summary>
    private NpgsqlDataSource ListenSource()
    {
        if (options.ListenDataSource is { } configured)
        {
            return configured;
        }

        var builder = new NpgsqlConnectionStringBuilder(dataSource.ConnectionString);
        if (!builder.Multiplexing)
        {
            return dataSource;
        }

        lock (_sync)
        {
            if (_ownedListenSource is null)
            {
                builder.Multiplexing = false;
                builder.MaxPoolSize = 1;
                _ownedListenSource = NpgsqlDataSource.Create(builder.ConnectionString);
            }

            return _ownedListenSource;
        }
    }

    private async Task CatchUpAsync(NpgsqlConnection connection, CancellationToken stop)
    {
        var pools = new List<string>();
        using (var deadline = new StatementDeadline(options.CommandTimeout, TimeProvider.System, stop))
        await using (var command = new NpgsqlCommand(poolIdsSql, connection) { CommandTimeout = PostgresStoreContext.DriverCommandTimeout })
        await using (var reader = await command.ExecuteReaderAsync(deadline.Token))
        {
            while (await reader.ReadAsync(deadline.Token))
            {
                pools.Add(reader.GetString(0));
            }
        }

        foreach (var pool in pools)
        {
            Raise(new PoolChanged(pool, PoolChangeKind.SettingsChanged));
            Raise(new PoolChanged(pool, PoolChangeKind.CapacityAvailable));
        }
    }

    private void Dispatch(string payload)
    {
        var colon = payload.LastIndexOf(':');
        if (colon <= 0)
        {
            return;
        }

        Raise(new PoolChanged(payload[..colon], payload[(colon + 1)..] == "s" ? PoolChangeKind.SettingsChanged : PoolChangeKind.CapacityAvailable));
    }

    private void Raise(PoolChanged change)
    {
        storeHandler(change);
        foreach (var handler in Volatile.Read(ref _handlers))
        {
            handler(change);
        }
    }

    private sealed class Subscription(PostgresChangeFeed listener, Action<PoolChanged> handler) : IDisposable
    {
        private int _disposed;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0)
            {
                return;
            }

            // Remove one entry only: another subscription may hold an equal delegate.
            lock (listener._sync)
            {
                var index = Array.IndexOf(listener._handlers, handler);
                if (index >= 0)
                {
                    listener._handlers = [.. listener._handlers[..index], .. listener._handlers[(index + 1)..]];
                }
            }
        }
    }
}
