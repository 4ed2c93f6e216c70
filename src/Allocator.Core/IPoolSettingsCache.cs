namespace Allocator;

/// <summary>
/// Pool settings (strategy, default lease, maximum wait, registration serialization) for hot
/// paths, read from the store at most once per cache period per pool and dropped at once when the
/// store's <see cref="IPoolChangeFeed"/> says a pool's settings changed. One per store; the store
/// itself and the grains use the same one. Plain reads (<see cref="IWorkerStore.GetPoolAsync"/>)
/// always go to the store.
/// </summary>
public interface IPoolSettingsCache
{
    /// <summary>The pool's settings, or <see langword="null"/> when the pool does not exist.</summary>
    ValueTask<PoolSettings?> GetAsync(string poolId, CancellationToken cancellationToken = default);

    /// <summary>Forgets a pool's settings (they changed through this instance, or the pool is gone).</summary>
    void Invalidate(string poolId);
}
