using System.Collections.Concurrent;

namespace Allocator.Grains;

/// <summary>
/// Hands items from any thread to a grain's turns in arrival order: the first item after a drain
/// posts one drain turn, and items that arrive before it runs ride along with it (one turn for a
/// burst, not one each).
/// </summary>
/// <param name="post">Queues an action as a turn of the owning grain.</param>
/// <param name="handle">Runs in the grain's turn, once per item.</param>
internal sealed class TurnInbox<T>(Action<Action> post, Action<T> handle)
{
    private readonly ConcurrentQueue<T> _items = new();
    private int _drainPosted;

    /// <summary>Any thread.</summary>
    public void Add(T item)
    {
        _items.Enqueue(item);
        if (Interlocked.Exchange(ref _drainPosted, 1) == 0)
        {
            post(Drain);
        }
    }

    private void Drain()
    {
        // Cleared before reading: an item added from now on posts a drain of its own.
        Volatile.Write(ref _drainPosted, 0);
        while (_items.TryDequeue(out var item))
        {
            handle(item);
        }
    }
}
