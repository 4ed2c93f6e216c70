namespace Allocator;

/// <summary>
/// The ranking of workers: the higher of <c>load / capacity</c> and the worker's own reported
/// load index, least wins, ties broken by worker id (ordinal).
/// </summary>
/// <remarks>
/// The score is an integer scaled so that a full worker scores <see cref="Full"/> (10^12). An
/// integer score of 0–10000 would give a worker of capacity 1,000,000 one score value per 100
/// slots, and the lowest ids would fill first (a measured spread of 100 slots). At 10^12 every
/// slot of the largest allowed worker (<see cref="AllocatorLimits.MaxCapacity"/>) changes the
/// score by 10^6 units, and <c>load * Full</c> still fits in a 64-bit integer. Every store
/// computes exactly this expression so that orders agree.
/// </remarks>
public static class WorkerScore
{
    /// <summary>The score of a full worker.</summary>
    public const long Full = 1_000_000_000_000;

    /// <summary>Score units per point of the 0–10000 reported load index.</summary>
    public const long PerLoadIndexPoint = Full / AllocatorLimits.MaxLoadIndex;

    public static long Compute(int load, int capacity, int? reportedLoadIndex)
    {
        if (capacity <= 0)
        {
            return Full;
        }

        var byLoad = load * Full / capacity;
        var byIndex = (reportedLoadIndex ?? 0) * PerLoadIndexPoint;
        return Math.Max(byLoad, byIndex);
    }

    /// <summary>A score as a load index (0–10000, fractional), for display and telemetry.</summary>
    public static double ToLoadIndex(long score) => (double)score / PerLoadIndexPoint;
}
