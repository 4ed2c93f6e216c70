using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace Allocator.Telemetry;

/// <summary>
/// The <see cref="ActivitySource"/> and <see cref="Meter"/> every Allocator component reports
/// through. BCL primitives only: the host subscribes to the name <c>Allocator</c> with the
/// OpenTelemetry SDK.
/// </summary>
public static class AllocatorTelemetry
{
    public const string Name = "Allocator";

    public static readonly ActivitySource ActivitySource = new(Name, typeof(AllocatorTelemetry).Assembly.GetName().Version?.ToString());

    public static readonly Meter Meter = new(Name, typeof(AllocatorTelemetry).Assembly.GetName().Version?.ToString());

    /// <summary>Attribute names used on Allocator spans and metrics.</summary>
    public static class Tags
    {
        public const string Pool = "allocator.pool";
        public const string Strategy = "allocator.strategy";
        public const string Store = "allocator.store";
        public const string Worker = "allocator.worker";
        public const string Rank = "allocator.rank";
        public const string ExcessScore = "allocator.excess_score";
        public const string RowsSkipped = "allocator.rows_skipped";
        public const string BlockingFallback = "allocator.blocking_fallback";
        public const string Retries = "allocator.retries";
        public const string QueueWaitMs = "allocator.queue_wait_ms";
        public const string BatchSize = "allocator.batch_size";
        public const string BatchesInFlightLimit = "allocator.batches_in_flight_limit";
        public const string Outcome = "allocator.outcome";
        public const string Units = "allocator.units";
    }
}
