namespace Allocator;

/// <summary>A domain failure with a stable kind that callers (and the HTTP layer) map to an answer.</summary>
public sealed class AllocatorException : Exception
{
    public AllocatorException(AllocatorErrorKind kind, string message, Exception? innerException = null)
        : base(message, innerException) => Kind = kind;

    public AllocatorException(AllocatorErrorKind kind, string message, bool outcomeUnknown, Exception? innerException)
        : base(message, innerException)
    {
        Kind = kind;
        OutcomeUnknown = outcomeUnknown;
    }

    public AllocatorErrorKind Kind { get; }

    /// <summary>
    /// With <see cref="AllocatorErrorKind.Unavailable"/>: the operation may have been applied (a
    /// timeout, a dropped connection, a database restart). Answer "unavailable, outcome unknown:
    /// retry with the same idempotency key" (503 with Retry-After), never "nothing was written".
    /// </summary>
    public bool OutcomeUnknown { get; }

    public static AllocatorException PoolNotFound(string poolId) =>
        new(AllocatorErrorKind.NotFound, $"Pool '{poolId}' does not exist.");
}
