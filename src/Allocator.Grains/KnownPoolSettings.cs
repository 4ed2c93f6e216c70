namespace Allocator.Grains;

/// <summary>
/// A pool grain's view of its pool's settings (strategy for telemetry, maximum wait): read once
/// per activation through the silo's settings cache, and read again when the pool announces a
/// change. Until a read succeeds the settings last read stay in force: a change applies a
/// moment late, but nothing falls back to "unknown" meanwhile (issue 20, #2: while they were
/// unknown, callers could not wait for capacity).
/// </summary>
/// <remarks>
/// Single-threaded by contract, as <see cref="GroupCommitQueue{TItem}"/>: called from the grain's
/// turns only, and its awaits come back to them. Nothing here decides a lease: the store applies
/// the pool's default lease with the settings it reads as it allocates.
/// </remarks>
/// <param name="readFailed">Told of a read that failed (not of one abandoned because <paramref name="stopping"/> was canceled).</param>
/// <param name="stopping">Canceled when the grain stops: reads in progress end.</param>
internal sealed class KnownPoolSettings(string poolId, IPoolSettingsCache cache, Action<Exception> readFailed, CancellationToken stopping)
{
    private Task<PoolSettings?>? _read;
    private int _version;
    private bool _stale;

    /// <summary>The settings last read, or <see langword="null"/> while none are known (never read, or the pool is gone).</summary>
    public PoolSettings? Current { get; private set; }

    /// <summary>The last read found no such pool (as opposed to failing).</summary>
    public bool PoolMissing { get; private set; }

    /// <summary>The pool's settings changed: read them again, keeping the current ones until then.</summary>
    public void Changed()
    {
        // The cache may hear of the change after the grain does: drop its entry first.
        cache.Invalidate(poolId);
        _version++;
        _read = null;
        _stale = true;
        _ = ReadAndKeepAsync();
    }

    /// <summary>
    /// The settings: the known ones at once (stale ones start a read again in the background), or
    /// read now when none are known; <see langword="null"/> when none can be read.
    /// </summary>
    public async Task<PoolSettings?> EnsureAsync()
    {
        if (Current is { } known)
        {
            if (_stale && _read is null)
            {
                _ = ReadAndKeepAsync(); // the last re-read failed: try again
            }

            return known;
        }

        return await ReadAndKeepAsync();
    }

    private async Task<PoolSettings?> ReadAndKeepAsync()
    {
        var version = _version;
        _read ??= ReadAsync();
        var read = _read;
        try
        {
            var settings = await read;
            if (version == _version)
            {
                Current = settings;
                PoolMissing = settings is null;
                _stale = false;
            }

            return settings;
        }
        catch (Exception ex) when (!stopping.IsCancellationRequested)
        {
            readFailed(ex);
            return Current;
        }
        finally
        {
            if (ReferenceEquals(_read, read))
            {
                _read = null;
            }
        }
    }

    private async Task<PoolSettings?> ReadAsync() => await cache.GetAsync(poolId, stopping);
}
