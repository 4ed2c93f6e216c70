namespace Allocator.Storage.InMemory.Internal;

/// <summary>The pool directory of the in-memory store (<see cref="IPoolPlacementStore"/>): read, compare and set, count.</summary>
internal sealed class InMemoryPoolDirectory(InMemoryStoreContext context)
{
    public Task<PoolPlacement?> GetPlacementAsync(string poolId, CancellationToken cancellationToken)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        lock (context.Sync)
        {
            return Task.FromResult(context.Directory.GetValueOrDefault(poolId));
        }
    }

    public Task<bool> ReplacePlacementAsync(PoolPlacement? expected, PoolPlacement replacement, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(replacement);
        AllocatorValidation.EnsurePoolId(replacement.PoolId);
        if (expected is not null && !string.Equals(expected.PoolId, replacement.PoolId, StringComparison.Ordinal))
        {
            throw new ArgumentException("The expected and the new entry must be of one pool.", nameof(expected));
        }

        lock (context.Sync)
        {
            if (context.Directory.GetValueOrDefault(replacement.PoolId) != expected)
            {
                return Task.FromResult(false);
            }

            context.Directory[replacement.PoolId] = replacement;
        }

        context.Raise(new PoolChanged(replacement.PoolId, PoolChangeKind.SettingsChanged));
        return Task.FromResult(true);
    }

    public Task<IReadOnlyDictionary<string, long>> CountPoolsAsync(string defaultDatabase, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(defaultDatabase);
        lock (context.Sync)
        {
            var counts = context.Directory.Values.GroupBy(p => p.MovingTo ?? p.Database, StringComparer.Ordinal)
                .ToDictionary(g => g.Key, g => (long)g.Count(), StringComparer.Ordinal);
            counts[defaultDatabase] = counts.GetValueOrDefault(defaultDatabase) + context.Pools.Keys.Count(p => !context.Directory.ContainsKey(p));
            return Task.FromResult<IReadOnlyDictionary<string, long>>(counts);
        }
    }
}
