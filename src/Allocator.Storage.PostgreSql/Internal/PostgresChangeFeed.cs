using Npgsql;

namespace Allocator.Storage.PostgreSql.Internal;

/// <summary>
/// LISTENs on the schema's channel over one dedicated connection, started when the store is
/// created (or by the first subscription), and reopens it after a drop (notifications sent while it was down are lost;
/// waiters re-check on their own deadline). Payload: <c>pool id ':' kind</c> (c = capacity, s = settings).
/// </summary>
internal sealed class PostgresChangeFeed(NpgsqlDataSource dataSource, string channel, PostgresWorkerStoreOptions options, TimeProvider time, Action<PoolChanged> storeHandler) : IAsyncDisposable
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
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await using var connection = await ListenSource().OpenConnectionAsync(stop);
                connection.Notification += (_, e) => Dispatch(e.Payload);
                await using (var command = new NpgsqlCommand("LISTEN \"" + channel.Replace("\"", "\"\"", StringComparison.Ordinal) + "\"", connection))
                {
                    await command.ExecuteNonQueryAsync(stop);
                }

                _listening.TrySetResult();
                while (true)
                {
                    await connection.WaitAsync(stop);
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

    private void Dispatch(string payload)
    {
        var colon = payload.LastIndexOf(':');
        if (colon <= 0)
        {
            return;
        }

        var change = new PoolChanged(payload[..colon], payload[(colon + 1)..] == "s" ? PoolChangeKind.SettingsChanged : PoolChangeKind.CapacityAvailable);
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
