namespace Allocator.Grains.Runtime;

internal static class GrainErrors
{
    public static AllocatorException Stopping() =>
        new(AllocatorErrorKind.Unavailable, "The allocator is stopping; nothing was done. Retry, on another instance if there is one.");

    public static AllocatorException CallTimedOut(TimeSpan timeout) =>
        new(AllocatorErrorKind.Unavailable, $"The grain did not answer within {timeout}. The request may still complete; retry with the same session key.", new TimeoutException());
}
