using Allocator.Grains;
using Allocator.Host.Options;

namespace Allocator.Host.Demand;

/// <summary>
/// Workers wanted for a pool (issue 49), from its load and capacity (the store) and the demand its
/// grain counted over the window. docs/placement.md, "Demand", gives the formula in words:
/// <code>
/// unitsPerRequest = arrivedUnits / arrivals                       (1 without arrivals)
/// demandSlots     = load + peakWaiters × unitsPerRequest + refusedUnits
/// bufferSlots     = ⌈BufferFraction × demandSlots⌉ + ⌈arrivedUnits / window × HeadroomSeconds⌉
/// slotsPerWorker  = capacity / workers                            (1 in a pool without workers)
/// workersWanted   = max(MinimumWorkers, ⌈(demandSlots + bufferSlots) / slotsPerWorker⌉)
/// </code>
/// </summary>
/// <param name="ArrivalsPerSecond">Requests that reached the grain per second over the window.</param>
/// <param name="UnitsPerSecond">Units they asked for, per second.</param>
/// <param name="NoCapacityAnswers">Requests answered "no capacity" within the window (at once or when their wait ran out).</param>
/// <param name="Waiters">Callers parked in the grain now.</param>
/// <param name="PeakWaiters">The most callers parked at once within the window.</param>
/// <param name="DemandSlots">Slots in use, waited for and refused.</param>
/// <param name="BufferSlots">Idle room kept on top.</param>
/// <param name="SlotsPerWorker">The mean capacity of a worker the count is made of.</param>
/// <param name="WorkersWanted">Workers to run for the demand and the buffer.</param>
internal sealed record DemandEstimate(
    int WindowSeconds,
    double ArrivalsPerSecond,
    double UnitsPerSecond,
    long NoCapacityAnswers,
    int Waiters,
    int PeakWaiters,
    long DemandSlots,
    long BufferSlots,
    double SlotsPerWorker,
    long WorkersWanted)
{
    /// <summary>The estimate; null when the grain counted nothing (a grain of a release before 1.1.0).</summary>
    public static DemandEstimate? From(PoolStatistics statistics, PoolDemandCounts? counts, AllocatorDemandOptions options)
    {
        if (counts is null)
        {
            return null;
        }

        var seconds = Math.Max(1, counts.Window.TotalSeconds);
        var unitsPerRequest = counts.Arrivals == 0 ? 1.0 : (double)counts.ArrivedUnits / counts.Arrivals;
        // The most callers parked at once in the window, not the moment's count: an autoscaler polls
        // every few seconds, and a queue that comes and goes is demand all the same. A caller that
        // waited and was then served is counted twice (in the load too): this errs towards more.
        var demand = statistics.Load + (long)Math.Ceiling(counts.PeakWaiters * unitsPerRequest) + counts.RefusedUnits;
        var buffer = (long)Math.Ceiling(options.BufferFraction * demand)
            + (long)Math.Ceiling(counts.ArrivedUnits / seconds * options.HeadroomSeconds);
        // The pool's mean worker (draining ones included: they are what the pool is made of).
        var slotsPerWorker = statistics.Workers > 0 && statistics.Capacity > 0 ? (double)statistics.Capacity / statistics.Workers : 1.0;
        var wanted = Math.Max(options.MinimumWorkers, (long)Math.Ceiling((demand + buffer) / Math.Max(slotsPerWorker, 1e-9)));
        return new DemandEstimate(
            (int)seconds,
            Math.Round(counts.Arrivals / seconds, 3),
            Math.Round(counts.ArrivedUnits / seconds, 3),
            counts.Refusals,
            counts.WaitersNow,
            counts.PeakWaiters,
            demand,
            buffer,
            Math.Round(slotsPerWorker, 3),
            wanted);
    }
}
