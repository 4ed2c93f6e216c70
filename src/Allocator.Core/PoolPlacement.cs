namespace Allocator;

/// <summary>
/// A pool's entry in the pool directory (issue 23): the named database that holds it, and the
/// database it is being moved to while a move is under way. A pool without an entry lives in the
/// default database.
/// </summary>
/// <param name="PoolId">The pool.</param>
/// <param name="Database">The name of the database that holds the pool (<c>Allocator:Databases:{name}</c>).</param>
/// <param name="MovingTo">The database a move is taking the pool to; <see langword="null"/>: no move under way.</param>
public sealed record PoolPlacement(string PoolId, string Database, string? MovingTo = null);
