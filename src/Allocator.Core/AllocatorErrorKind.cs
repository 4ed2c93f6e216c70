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
