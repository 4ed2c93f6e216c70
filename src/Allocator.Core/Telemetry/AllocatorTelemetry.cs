using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace Allocator.Telemetry;

/// <summary>
/// The <see cref="ActivitySource"/> and <see cref="Meter"/> every Allocator component reports
/// through. BCL primitives only: the host subscribes to the name <c>Allocator</c> with the
/// OpenTelemetry SDK.
/// </summary>
/// <remarks>
/// Follows the OpenTelemetry semantic conventions: durations are recorded in seconds (unit
/// <c>s</c>), attribute names carry no unit, and enumerated attribute values are snake_case.
/// </remarks>
public static class AllocatorTelemetry
{
    public const string Name = "Allocator";

    public static readonly ActivitySource ActivitySource = new(Name, typeof(AllocatorTelemetry).Assembly.GetName().Version?.ToString());

    public static readonly Meter Meter = new(Name, typeof(AllocatorTelemetry).Assembly.GetName().Version?.ToString());

    /// <summary>
    /// Bucket boundaries, in seconds, of every Allocator duration histogram: a sub-millisecond
    /// store call on loopback and a 250 ms round trip are both resolved (roughly 1-2-3-5 steps
    /// from 0.5 ms to 30 s). Given as instrument advice, which the OpenTelemetry SDK applies
    /// unless a view overrides it.
    /// </summary>
    public static readonly IReadOnlyList<double> DurationBuckets =
    [
        0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
        0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10, 30,
    ];

    /// <summary>The advice every Allocator duration histogram is created with (<see cref="DurationBuckets"/>).</summary>
    public static readonly InstrumentAdvice<double> DurationAdvice = new() { HistogramBucketBoundaries = DurationBuckets };

    /// <summary>Creates a duration histogram in seconds with <see cref="DurationAdvice"/>.</summary>
    public static Histogram<double> CreateDurationHistogram(string name, string description) =>
        Meter.CreateHistogram(name, "s", description, tags: null, advice: DurationAdvice);

    /// <summary>
    /// Tags a store's allocate span for a batch of one request with its outcome and the store's
    /// decision (a larger batch's callers each have these on their own spans, in the grain).
    /// </summary>
    public static void TagSingleAllocation(Activity activity, AllocationRequest request, AllocationOutcome outcome)
    {
        activity.SetTag(Tags.Outcome, Outcomes.Of(outcome.Status));
        activity.SetTag(Tags.Worker, outcome.Allocation?.WorkerId);
        activity.SetTag(Tags.Units, request.Units);
        activity.SetTag(Tags.Rank, outcome.Decision.Rank);
        activity.SetTag(Tags.ExcessScore, outcome.Decision.ExcessScore);
        activity.SetTag(Tags.RowsSkipped, outcome.Decision.RowsSkipped);
        activity.SetTag(Tags.BlockingFallback, outcome.Decision.BlockingFallback);
    }

    /// <summary>Attribute names used on Allocator spans and metrics.</summary>
    public static class Tags
    {
        public const string Pool = "allocator.pool";
        public const string Strategy = "allocator.strategy";
        public const string Store = "allocator.store";

        /// <summary>The name of the database (<c>Allocator:Databases:{name}</c>) that holds the pool (issue 23).</summary>
        public const string Database = "allocator.database";
        public const string Worker = "allocator.worker";
        public const string Rank = "allocator.rank";
        public const string ExcessScore = "allocator.excess_score";
        public const string RowsSkipped = "allocator.rows_skipped";
        public const string BlockingFallback = "allocator.blocking_fallback";
        public const string Retries = "allocator.retries";

        /// <summary>Seconds the request waited in the pool grain before its batch ran (a double).</summary>
        public const string QueueWait = "allocator.queue_wait.duration";
        public const string BatchSize = "allocator.batch_size";
        public const string BatchesInFlightLimit = "allocator.batches_in_flight_limit";
        public const string Outcome = "allocator.outcome";
        public const string Units = "allocator.units";
    }

    /// <summary>Values of <see cref="Tags.Outcome"/> (snake_case).</summary>
    public static class Outcomes
    {
        public const string Allocated = "allocated";
        public const string Existing = "existing";
        public const string NoCapacity = "no_capacity";
        public const string Unavailable = "unavailable";
        public const string Timeout = "timeout";
        public const string Canceled = "canceled";
        public const string Error = "error";

        public static string Of(AllocationStatus status) => status switch
        {
            AllocationStatus.Allocated => Allocated,
            AllocationStatus.Existing => Existing,
            AllocationStatus.NoCapacity => NoCapacity,
            _ => Unavailable,
        };

        /// <summary>Release and renew outcomes: <c>ok</c>, <c>not_found</c>, <c>not_active</c>, <c>stale_epoch</c>.</summary>
        public static string Of(LeaseStatus status) => status switch
        {
            LeaseStatus.Ok => "ok",
            LeaseStatus.NotFound => "not_found",
            LeaseStatus.NotActive => "not_active",
            LeaseStatus.StaleEpoch => "stale_epoch",
            _ => "unknown",
        };
    }

    /// <summary>The value of <see cref="Tags.Strategy"/> (snake_case: <c>skip_locked</c>, <c>strict</c>), not the API name.</summary>
    public static string StrategyValue(AllocationStrategy strategy) => strategy switch
    {
        AllocationStrategy.SkipLocked => "skip_locked",
        AllocationStrategy.Strict => "strict",
        _ => "unknown",
    };
}
