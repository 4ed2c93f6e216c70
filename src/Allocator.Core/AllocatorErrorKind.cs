namespace Allocator;

public enum AllocatorErrorKind
{
    /// <summary>The pool (or another named thing) does not exist.</summary>
    NotFound,

    /// <summary>The request conflicts with the current state.</summary>
    Conflict,

    /// <summary>
    /// The store could not complete the operation (a lock timeout after retries, the database
    /// unreachable). Nothing was written unless <see cref="AllocatorException.OutcomeUnknown"/> says
    /// the outcome is unknown; retrying with the same idempotency key is safe either way.
    /// </summary>
    Unavailable,
}
