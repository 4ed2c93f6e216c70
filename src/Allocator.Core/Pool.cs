namespace Allocator;

/// <summary>A named set of workers and its settings.</summary>
public sealed record Pool(string PoolId, PoolSettings Settings);
