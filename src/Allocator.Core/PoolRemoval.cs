namespace Allocator;

/// <summary>What <see cref="IPoolPlacementStore.RemovePoolIfEmptyAsync"/> found and did.</summary>
/// <param name="Found">The pool existed in this database.</param>
/// <param name="Removed">It was empty and is gone from this database.</param>
/// <param name="Workers">Workers it still has (in any state); 0 when removed.</param>
/// <param name="ActiveAllocations">Allocations still active in it; 0 when removed.</param>
public readonly record struct PoolRemoval(bool Found, bool Removed, int Workers, long ActiveAllocations);
