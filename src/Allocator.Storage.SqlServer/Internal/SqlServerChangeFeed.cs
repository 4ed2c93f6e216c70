namespace Allocator.Storage.SqlServer.Internal;

/// <summary>
/// Pool change notifications without LISTEN/NOTIFY or Service Broker: changes made through this
/// instance are raised at once, in process; changes made through other instances are found by
/// polling the <c>pool_changes</c> counters, with a pause that doubles (up to a bound) while
/// nothing changes and drops back to the shortest after a change. Polling runs only while
/// someone is subscribed. A change may be reported twice (in process, then by the poll): waiters
/// re-check, so a duplicate costs one statement, never correctness.
/// </summary>
internal sealed class SqlServerChangeFeed(SqlServerStoreContext context, SqlServerWorkerStoreOptions options, TimeProvider time) : IAsyncDisposable
{
    private readonly object _sync = new();
    private Action<PoolChanged>[] _handlers = [];
    private CancellationTokenSource? _pollStop;
    private Task _polling = Task.CompletedTask;

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        lock (_sync)
        {
            _handlers = [.. _handlers, handler];
            if (_pollStop is null)
            {
                _pollStop = new CancellationTokenSource();
                _polling = Task.Run(() => PollAsync(_pollStop.Token));
            }
        }

        return new Subscription(this, handler);
    }

    public void Raise(PoolChanged change)
    {
        if (change.Kind == PoolChangeKind.SettingsChanged)
        {
            context.SettingsCache.Invalidate(change.PoolId);
        }

        foreach (var handler in Volatile.Read(ref _handlers))
        {
            try
            {
                handler(change);
            }
            catch (Exception)
            {
                // A handler's failure is its own; it must not stop notifications for the others.
            }
        }
    }

    /// <summary>The next pause: the shortest after a change, else double the last, up to the longest.</summary>
    internal static TimeSpan NextDelay(TimeSpan current, bool changed, TimeSpan min, TimeSpan max) =>
        changed ? min : TimeSpan.FromTicks(Math.Min(max.Ticks, Math.Max(min.Ticks, current.Ticks * 2)));

    public async ValueTask DisposeAsync()
    {
        Task polling;
        lock (_sync)
        {
            _pollStop?.Cancel();
            polling = _polling;
        }

        try
        {
            await polling;
        }
        catch (OperationCanceledException)
        {
        }
    }

    private async Task PollAsync(CancellationToken stop)
    {
        Dictionary<string, (long Capacity, long Settings)>? last = null;
        var delay = options.ChangePollMinInterval;
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await Task.Delay(delay, time, stop);
                var rows = await ReadPoolChangesAsync(stop);
                var changed = false;
                var current = new Dictionary<string, (long, long)>(StringComparer.Ordinal);
                foreach (var (poolId, capacity, settings) in rows)
                {
                    current[poolId] = (capacity, settings);
                    if (last is not null && last.TryGetValue(poolId, out var seen))
                    {
                        if (seen.Capacity != capacity)
                        {
                            changed = true;
                            Raise(new PoolChanged(poolId, PoolChangeKind.CapacityAvailable));
                        }

                        if (seen.Settings != settings)
                        {
                            changed = true;
                            Raise(new PoolChanged(poolId, PoolChangeKind.SettingsChanged));
                        }
                    }
                }

                last = current;
                delay = NextDelay(delay, changed, options.ChangePollMinInterval, options.ChangePollMaxInterval);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                return;
            }
            catch (Exception)
            {
                // Database unreachable for a moment: back off fully and keep going; in-process
                // notifications still flow.
                delay = options.ChangePollMaxInterval;
            }
        }
    }

    /// <summary>Every pool's change counters (get_pool_changes.sql).</summary>
    private async Task<IReadOnlyList<(string PoolId, long Capacity, long Settings)>> ReadPoolChangesAsync(CancellationToken cancellationToken) =>
        await context.RunAsync<IReadOnlyList<(string, long, long)>>(null, context.Commands.GetPoolChanges, async (reader, ct) =>
        {
            var rows = new List<(string, long, long)>();
            while (await reader.ReadAsync(ct))
            {
                rows.Add((reader.GetString(0), reader.GetInt64(1), reader.GetInt64(2)));
            }

            return rows;
        }, cancellationToken);

    private void Unsubscribe(Action<PoolChanged> handler)
    {
        lock (_sync)
        {
            _handlers = [.. _handlers.Where(h => h != handler)];
            if (_handlers.Length == 0 && _pollStop is not null)
            {
                _pollStop.Cancel();
                _pollStop = null;
            }
        }
    }

    private sealed class Subscription(SqlServerChangeFeed monitor, Action<PoolChanged> handler) : IDisposable
    {
        private int _disposed;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) == 0)
            {
                monitor.Unsubscribe(handler);
            }
        }
    }
}
