namespace Allocator;

/// <summary>Result of creating or updating a pool.</summary>
public sealed record PoolUpsertResult(Pool Pool, bool Created);
