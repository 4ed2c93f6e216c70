namespace Allocator;

/// <summary>
/// Pool changes that waiting callers and caches care about (capacity freed, settings changed),
/// including those made through other service instances where the store can see them. Each
/// store provides one; a store class may implement both this and <see cref="IWorkerStore"/>.
/// </summary>
/// <remarks>
/// Delivery is best effort: a notification may be lost (a dropped connection) or come twice.
/// Subscribers re-check on their own deadline and treat every notification as a hint.
/// </remarks>
public interface IPoolChangeFeed
{
    /// <summary>
    /// Calls <paramref name="handler"/> for every change seen from now on, until the returned
    /// subscription is disposed. Handlers run on a store thread and must not block.
    /// </summary>
    IDisposable Subscribe(Action<PoolChanged> handler);
}
