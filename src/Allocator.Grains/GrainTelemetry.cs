using System.Diagnostics;
using System.Diagnostics.Metrics;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>Span names, outcome names and instruments of the grains, on the shared <c>Allocator</c> source and meter.</summary>
internal static class GrainTelemetry
{
    /// <summary>One per caller: from the call reaching the pool grain to its answer (including any wait).</summary>
    public const string AllocateSpan = "allocator.grain.allocate";

    /// <summary>One per store batch; linked to every caller span it served, child of the first.</summary>
    public const string BatchSpan = "allocator.batch";

    /// <summary>One per release caller: from the call reaching the pool grain to its answer.</summary>
    public const string ReleaseSpan = "allocator.grain.release";

    /// <summary>One per store release batch; linked to every caller span it served, child of the first.</summary>
    public const string ReleaseBatchSpan = "allocator.release_batch";

    public const string RegisterSpan = "allocator.grain.register";

    public const string RegistrationBatchSpan = "allocator.registration_batch";

    public static readonly Histogram<double> AllocationDuration = AllocatorTelemetry.CreateDurationHistogram(
        "allocator.allocation.duration", "Time from an allocate call reaching the pool grain to its answer, waits included.");

    /// <summary>
    /// How long an answered request waited in the grain before its batch went to the store (for
    /// the gather window, a free batch slot of the grain, or one of the silo's store slots). With
    /// allocator.batch.duration it splits
    /// allocator.allocation.duration into queueing, store and answer.
    /// </summary>
    public static readonly Histogram<double> QueueWait = AllocatorTelemetry.CreateDurationHistogram(
        "allocator.allocation.queue_wait", "Time an allocate request waited in the pool grain before its store batch started.");

    /// <summary>
    /// How long a grain's store batch (allocation, release or registration) waited in line for
    /// one of the silo's store slots, recorded when the slot is handed over; batches that found one
    /// free are not recorded. A rate of these close to the batches' own says the silo's database
    /// connections, not the grains, bound its batches (docs/decisions/0025).
    /// </summary>
    public static readonly Histogram<double> StoreSlotWait = AllocatorTelemetry.CreateDurationHistogram(
        "allocator.store.slot_wait", "Time a grain's store batch waited in line for one of the silo's store slots (waits only).");

    public static readonly Counter<long> Outcomes = AllocatorTelemetry.Meter.CreateCounter<long>(
        "allocator.allocation.outcomes", "{allocation}", "Allocate answers by outcome (allocated, existing, no_capacity, unavailable, error, canceled).");

    public static readonly Counter<long> Fallbacks = AllocatorTelemetry.Meter.CreateCounter<long>(
        "allocator.allocation.fallbacks", "{allocation}", "Allocations that needed the blocking (lock-waiting) fallback.");

    public static readonly Histogram<int> BatchSize = AllocatorTelemetry.Meter.CreateHistogram<int>(
        "allocator.batch.size", "{request}", "Requests per store allocation batch.");

    /// <summary>
    /// The store call of one allocation batch: round trip, statement and commit, without the time
    /// requests queued in the grain (that is in allocator.allocation.duration). The gap between
    /// the two shows whether callers wait on the database or on a free batch slot.
    /// </summary>
    public static readonly Histogram<double> BatchDuration = AllocatorTelemetry.CreateDurationHistogram(
        "allocator.batch.duration", "Store call time of one allocation batch (round trip, statement, commit).");

    public static readonly Histogram<int> ReleaseBatchSize = AllocatorTelemetry.Meter.CreateHistogram<int>(
        "allocator.release.batch.size", "{release}", "Releases per store release batch.");

    public static readonly UpDownCounter<int> Waiters = AllocatorTelemetry.Meter.CreateUpDownCounter<int>(
        "allocator.waiters", "{caller}", "Callers parked in pool grains waiting for capacity.");

    public static readonly Histogram<int> RegistrationBatchSize = AllocatorTelemetry.Meter.CreateHistogram<int>(
        "allocator.registration.batch.size", "{worker}", "Workers per store registration batch.");

    public static readonly Counter<long> AbandonedReleases = AllocatorTelemetry.Meter.CreateCounter<long>(
        "allocator.allocation.abandoned_releases", "{allocation}", "Allocations the pool grain released because their caller gave up while the batch was in the store.");

    public static readonly Counter<long> TurnFailures = AllocatorTelemetry.Meter.CreateCounter<long>(
        "allocator.grain.turn_failures", "{turn}", "Posted grain turns or timer callbacks that threw (a bug: grain code handles its own errors).");

    public static string ToOutcomeName(this AllocationStatus status) => AllocatorTelemetry.Outcomes.Of(status);

    /// <summary>
    /// Starts a span whose parent is exactly <paramref name="parent"/> (a root when default), not
    /// whatever happens to be <see cref="Activity.Current"/> in the grain's turn, and leaves
    /// <see cref="Activity.Current"/> as it was.
    /// </summary>
    public static Activity? StartDetached(string name, ActivityContext parent, IEnumerable<ActivityLink>? links = null)
    {
        var previous = Activity.Current;
        Activity.Current = null;
        try
        {
            return AllocatorTelemetry.ActivitySource.StartActivity(name, ActivityKind.Internal, parent, links: links);
        }
        finally
        {
            Activity.Current = previous;
        }
    }
}
