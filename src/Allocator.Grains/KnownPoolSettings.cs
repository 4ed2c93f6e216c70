namespace Allocator.Grains;

/// <summary>
/// A pool grain's view of its pool's settings (strategy for telemetry, maximum wait): read once
/// per activation through the silo's settings cache, and read again when the pool announces a
/// change. A failed read only leaves them unknown until the next need reads again.
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: called from the grain's
/// turns only, and its awaits come back to them.
/// </remarks>
/// <param name="readFailed">Told of a read that failed (not of one abandoned because <paramref name="stopping"/> was canceled).</param>
/// <param name="stopping">Canceled when the grain stops: reads in progress end.</param>
internal sealed class KnownPoolSettings(string poolId, IPoolSettingsCache cache, Action<Exception> readFailed, CancellationToken stopping)
{
    private Task<PoolSettings?>? _read;
    private int _version;

    /// <summary>The settings last read, or <see langword="null"/> while none are known.</summary>
    public PoolSettings? Current { get; private set; }

    /// <summary>The pool's settings changed: forget what was read and read them again.</summary>
    public void Changed()
    {
        // The cache may hear of the change after the grain does: drop its entry first.
        cache.Invalidate(poolId);
        Current = null;
        _read = null;
        _version++;
        _ = EnsureAsync();
    }

    /// <summary>The settings, read now if none are known; <see langword="null"/> when they cannot be read.</summary>
    public async Task<PoolSettings?> EnsureAsync()
    {
        if (Current is { } known)
        {
            return known;
        }

        var version = _version;
        _read ??= ReadAsync();
        var read = _read;
        try
        {
            var settings = await read;
            if (version == _version)
            {
                Current = settings;
            }

            return settings;
        }
        catch (Exception ex) when (!stopping.IsCancellationRequested)
        {
            readFailed(ex);
            if (ReferenceEquals(_read, read))
            {
                _read = null;
            }

            return null;
        }
    }

    private async Task<PoolSettings?> ReadAsync() => await cache.GetAsync(poolId, stopping);
}
