namespace Allocator;

/// <summary>A change to a pool that waiting callers or caches care about. May come from another instance.</summary>
public readonly record struct PoolChanged(string PoolId, PoolChangeKind Kind);
