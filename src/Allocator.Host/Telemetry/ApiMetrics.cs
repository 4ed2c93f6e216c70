using System.Diagnostics;
using System.Diagnostics.Metrics;
using Allocator.Host.Storage;
using Allocator.Telemetry;

namespace Allocator.Host.Telemetry;

/// <summary>Allocation metrics as the HTTP API sees them (grains and stores report their own).</summary>
internal sealed class ApiMetrics(PoolGauges gauges, IPoolPlacement placement)
{
    private readonly Histogram<double> _duration = AllocatorTelemetry.CreateDurationHistogram(
        "allocator.api.allocation.duration", "Time to answer an allocate request, waiting included.");

    private readonly Counter<long> _outcomes = AllocatorTelemetry.Meter.CreateCounter<long>(
        "allocator.api.allocations", "{allocation}", "Allocate requests answered, by outcome.");

    public void RecordAllocation(string pool, string outcome, TimeSpan elapsed)
    {
        var tags = new TagList
        {
            { AllocatorTelemetry.Tags.Pool, pool },
            { AllocatorTelemetry.Tags.Outcome, outcome },
            // Known without a read: the route cached by the call (issue 23); "unknown" for a pool not served.
            { AllocatorTelemetry.Tags.Database, placement.KnownDatabaseOf(pool) ?? "unknown" },
        };
        _duration.Record(elapsed.TotalSeconds, tags);
        _outcomes.Add(1, tags);
        gauges.Seen(pool);
    }
}
