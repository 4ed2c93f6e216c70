namespace Allocator;

public enum AllocatorErrorKind
{
    /// <summary>The pool (or another named thing) does not exist.</summary>
    NotFound,

    /// <summary>The request conflicts with the current state.</summary>
    Conflict,

    /// <summary>The store could not complete the operation (e.g. lock timeout after retries); nothing was written.</summary>
    Unavailable,
}

/// <summary>A domain failure with a stable kind that callers (and the HTTP layer) map to an answer.</summary>
public sealed class AllocatorException : Exception
{
    public AllocatorException(AllocatorErrorKind kind, string message, Exception? innerException = null)
        : base(message, innerException) => Kind = kind;

    public AllocatorErrorKind Kind { get; }

    public static AllocatorException PoolNotFound(string poolId) =>
        new(AllocatorErrorKind.NotFound, $"Pool '{poolId}' does not exist.");
}
