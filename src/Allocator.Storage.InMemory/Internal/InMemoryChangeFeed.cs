namespace Allocator.Storage.InMemory.Internal;

/// <summary>
/// The in-memory store's <see cref="IPoolChangeFeed"/>: every change is raised in process, to
/// every subscriber, on the thread that made it (after the store's monitor is released).
/// </summary>
/// <param name="sync">The store's one monitor, which also guards the list of subscribers.</param>
internal sealed class InMemoryChangeFeed(object sync)
{
    private readonly object _sync = sync;
    private Action<PoolChanged>[] _handlers = [];

    public IDisposable Subscribe(Action<PoolChanged> handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        lock (_sync)
        {
            _handlers = [.. _handlers, handler];
        }

        return new Subscription(this, handler);
    }

    public void Raise(PoolChanged change)
    {
        foreach (var handler in Volatile.Read(ref _handlers))
        {
            handler(change);
        }
    }

    private sealed class Subscription(InMemoryChangeFeed feed, Action<PoolChanged> handler) : IDisposable
    {
        private int _disposed;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _disposed, 1) != 0)
            {
                return;
            }

            // Remove this subscription's entry only: another subscription may hold an equal delegate.
            lock (feed._sync)
            {
                var index = Array.IndexOf(feed._handlers, handler);
                if (index >= 0)
                {
                    feed._handlers = [.. feed._handlers.AsSpan(0, index), .. feed._handlers.AsSpan(index + 1)];
                }
            }
        }
    }
}
