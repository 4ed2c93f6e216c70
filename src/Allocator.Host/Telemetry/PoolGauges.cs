using System.Collections.Concurrent;
using System.Diagnostics.Metrics;
using Allocator.Grains;
using Allocator.Host.Demand;
using Allocator.Host.Options;
using Allocator.Telemetry;
using Microsoft.Extensions.Options;

namespace Allocator.Host.Telemetry;

/// <summary>
/// Per-pool gauges: <c>allocator.pool.utilization</c> (load / capacity, 0–1),
/// <c>allocator.pool.load</c> and <c>allocator.pool.capacity</c> (slots), from pool statistics,
/// and <c>allocator.pool.workers_wanted</c> from them and the pool grain's demand (issue 49).
/// </summary>
/// <remarks>
/// The pools are those this host served (an allocation, or a statistics read, within the last
/// <see cref="ForgetAfter"/>). Values come from the statistics the host reads anyway for
/// <c>GET /v1/pools/{pool}</c>, and from a refresh that a collection starts when the values are
/// older than <see cref="RefreshAfter"/>: one statistics query per pool, in the background, only
/// while something collects (an OTLP export every 60 s by default). So a reading can be up to one
/// collection interval old; nothing polls the database when nobody collects.
/// </remarks>
internal sealed partial class PoolGauges
{
    public static readonly TimeSpan RefreshAfter = TimeSpan.FromSeconds(10);
    public static readonly TimeSpan ForgetAfter = TimeSpan.FromMinutes(10);

    private readonly ConcurrentDictionary<string, Entry> _pools = new(StringComparer.Ordinal);
    private readonly IServiceProvider _services;
    private readonly TimeProvider _time;
    private readonly ILogger<PoolGauges> _logger;
    private int _refreshing;

    public PoolGauges(IMeterFactory meters, IServiceProvider services, TimeProvider time, ILogger<PoolGauges> logger)
    {
        _services = services;
        _time = time;
        _logger = logger;

        // A meter of this host's own (IMeterFactory), named like the shared one: the SDK's
        // AddMeter("Allocator") subscribes to both, and these gauges go away with the host.
        var meter = meters.Create(AllocatorTelemetry.Name);
        meter.CreateObservableGauge("allocator.pool.utilization", () => Observe(s => s.Utilization), "1", "Slots in use over all slots of the pool (0–1).");
        meter.CreateObservableGauge("allocator.pool.load", () => Observe(s => (double)s.Load), "{slot}", "Slots in use in the pool.");
        meter.CreateObservableGauge("allocator.pool.capacity", () => Observe(s => (double)s.Capacity), "{slot}", "Slots of all workers of the pool.");
        meter.CreateObservableGauge("allocator.pool.workers_wanted", ObserveWorkersWanted, "{worker}", "Workers to run for the pool's recent demand and the configured buffer (docs/placement.md, \"Demand\").");
    }

    /// <summary>The host served this pool (an allocation): keep its gauges fresh.</summary>
    public void Seen(string pool)
    {
        var now = _time.GetUtcNow();
        if (_pools.TryGetValue(pool, out var known) && now - known.LastSeen < TimeSpan.FromMinutes(1))
        {
            return; // The hot path: nothing to write.
        }

        _pools.AddOrUpdate(pool, _ => new Entry(null, DateTimeOffset.MinValue, now), (_, e) => e with { LastSeen = now });
    }

    /// <summary>Statistics the host read for this pool (a GET of the pool, or a refresh), and the demand they gave.</summary>
    public void Record(PoolStatistics statistics, DemandEstimate? demand = null)
    {
        var now = _time.GetUtcNow();
        _pools[statistics.PoolId] = new Entry(statistics, now, now, demand);
    }

    /// <summary>Refreshes stale pools now (the collection callback does this in the background).</summary>
    internal async Task RefreshAsync(CancellationToken cancellationToken)
    {
        var store = _services.GetRequiredService<IWorkerStore>();
        var now = _time.GetUtcNow();
        foreach (var (pool, entry) in _pools)
        {
            if (now - entry.LastSeen > ForgetAfter)
            {
                _pools.TryRemove(pool, out _);
                continue;
            }

            if (now - entry.ReadAt < RefreshAfter)
            {
                continue;
            }

            try
            {
                var statistics = await store.GetPoolStatisticsAsync(pool, cancellationToken);
                var demand = await ReadDemandAsync(statistics);
                _pools[pool] = new Entry(statistics, _time.GetUtcNow(), entry.LastSeen, demand);
            }
            catch (Exception ex) when (ex is not OperationCanceledException)
            {
                LogRefreshFailed(_logger, pool, ex);
            }
        }
    }

    /// <summary>The pool grain's demand counts turned into workers wanted; null when the grain cannot say.</summary>
    private async Task<DemandEstimate?> ReadDemandAsync(PoolStatistics statistics)
    {
        if (_services.GetService<IGrainFactory>() is not { } grains)
        {
            return null;
        }

        try
        {
            var status = await grains.GetPoolGrain(statistics.PoolId).GetStatusAsync();
            return DemandEstimate.From(statistics, status.Demand, _services.GetRequiredService<IOptions<AllocatorDemandOptions>>().Value);
        }
        catch (Exception ex) when (ex is not OperationCanceledException)
        {
            LogRefreshFailed(_logger, statistics.PoolId, ex);
            return null;
        }
    }

    private IEnumerable<Measurement<long>> ObserveWorkersWanted()
    {
        StartRefresh();
        foreach (var (pool, entry) in _pools)
        {
            if (entry.Demand is { } demand)
            {
                yield return new Measurement<long>(demand.WorkersWanted, new KeyValuePair<string, object?>(AllocatorTelemetry.Tags.Pool, pool));
            }
        }
    }

    private IEnumerable<Measurement<double>> Observe(Func<PoolStatistics, double> value)
    {
        StartRefresh();
        foreach (var (pool, entry) in _pools)
        {
            if (entry.Statistics is { } statistics)
            {
                yield return new Measurement<double>(value(statistics), new KeyValuePair<string, object?>(AllocatorTelemetry.Tags.Pool, pool));
            }
        }
    }

    /// <summary>Starts a background refresh of stale pools, unless one runs.</summary>
    private void StartRefresh()
    {
        if (Interlocked.CompareExchange(ref _refreshing, 1, 0) == 0)
        {
            _ = Task.Run(async () =>
            {
                try
                {
                    await RefreshAsync(CancellationToken.None);
                }
                finally
                {
                    Volatile.Write(ref _refreshing, 0);
                }
            });
        }
    }

    private sealed record Entry(PoolStatistics? Statistics, DateTimeOffset ReadAt, DateTimeOffset LastSeen, DemandEstimate? Demand = null);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Reading the statistics of pool {Pool} for its gauges failed.")]
    private static partial void LogRefreshFailed(ILogger logger, string pool, Exception exception);
}
