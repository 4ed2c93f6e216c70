namespace Allocator;

/// <summary>A domain failure with a stable kind that callers (and the HTTP layer) map to an answer.</summary>
public sealed class AllocatorException : Exception
{
    public AllocatorException(AllocatorErrorKind kind, string message, Exception? innerException = null)
        : base(message, innerException) => Kind = kind;

    public AllocatorErrorKind Kind { get; }

    public static AllocatorException PoolNotFound(string poolId) =>
        new(AllocatorErrorKind.NotFound, $"Pool '{poolId}' does not exist.");
}
