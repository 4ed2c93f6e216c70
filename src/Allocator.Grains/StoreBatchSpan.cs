using System.Diagnostics;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>The span of one store batch (allocation or release) of a pool grain, and the store call made under it.</summary>
internal static class StoreBatchSpan
{
    /// <summary>
    /// A child of <paramref name="parent"/> (the first caller's span) linked to every caller in
    /// <paramref name="links"/>, so that each caller finds its batch; <see cref="Activity.Current"/> is left as it was.
    /// </summary>
    public static Activity? Start(string name, ActivityContext parent, List<ActivityLink> links, string poolId, string storeName, int size, int limit)
    {
        var span = GrainTelemetry.StartDetached(name, parent, links);
        span?.SetTag(AllocatorTelemetry.Tags.Pool, poolId);
        span?.SetTag(AllocatorTelemetry.Tags.Store, storeName);
        span?.SetTag(AllocatorTelemetry.Tags.BatchSize, size);
        span?.SetTag(AllocatorTelemetry.Tags.BatchesInFlightLimit, limit);
        return span;
    }

    /// <summary>Calls the store with the batch span current, so the store's spans nest under it.</summary>
    public static Task<T> CallStore<T>(Activity? span, Func<Task<T>> call)
    {
        var previous = Activity.Current;
        Activity.Current = span;
        try
        {
            return call();
        }
        finally
        {
            Activity.Current = previous;
        }
    }
}
