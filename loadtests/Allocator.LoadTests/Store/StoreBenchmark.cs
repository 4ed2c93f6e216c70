using System.Diagnostics;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Store;

/// <summary>Settings of the <c>store</c> benchmark.</summary>
/// <param name="Callers">Concurrent callers per run (1: one call at a time, the pure per-call cost).</param>
internal sealed record StoreBenchmarkOptions(int Workers = 1_000, int Capacity = 1_000, int Runs = 5, TimeSpan? RunLength = null, int BatchSize = 64, int Callers = 1)
{
    public TimeSpan Length => RunLength ?? TimeSpan.FromSeconds(3);
}

/// <summary>The figures of one mode (single or batched): allocations per second per run, and per-call times.</summary>
internal sealed record StoreBenchmarkResult(string Mode, int BatchSize, IReadOnlyList<double> RatesPerRun, LatencyStatistics PerCall)
{
    public double MedianRate => RatesPerRun.Order().ElementAt(RatesPerRun.Count / 2);
}

/// <summary>
/// The first benchmark (issue 3): drives a store directly (no HTTP, no grain) on a pool of
/// 1,000 workers and measures single allocations per second and batched allocations per second,
/// each the median of several runs, plus p50/p99 per call. Each run gets a fresh store (a fresh
/// schema for PostgreSQL) so runs do not inherit each other's load or dead tuples, and
/// <paramref name="removeStore"/> (when given) removes it after the run.
/// </summary>
internal sealed class StoreBenchmark(Func<string, Task<IWorkerStore>> createStore, StoreBenchmarkOptions options, TextWriter output, Func<string, Task>? removeStore = null)
{
    public async Task<IReadOnlyList<StoreBenchmarkResult>> RunAsync(CancellationToken cancellationToken)
    {
        var runId = Guid.NewGuid().ToString("N")[..6];
        output.WriteLine($"store benchmark: {options.Workers:N0} workers × {options.Capacity:N0} slots, {options.Callers} caller(s), {options.Runs} runs × {options.Length.TotalSeconds:0.#} s per mode, batch {options.BatchSize}");

        // One untimed run warms up the JIT, the connection pool and the database's caches.
        await RunOnceAsync($"sb_{runId}_warm", 1, TimeSpan.FromSeconds(1), cancellationToken);

        var results = new List<StoreBenchmarkResult>();
        foreach (var (mode, batch) in new[] { ("single", 1), ("batched", options.BatchSize) })
        {
            var rates = new List<double>();
            var perCall = new List<List<long>>();
            for (var run = 1; run <= options.Runs; run++)
            {
                var (rate, ticks) = await RunOnceAsync($"sb_{runId}_{mode}_{run}", batch, options.Length, cancellationToken);
                rates.Add(rate);
                perCall.AddRange(ticks);
                output.WriteLine($"  {mode,-8} run {run}: {rate,12:N0} allocations/s");
            }

            var stats = LatencyStatistics.FromSorted(LatencyStatistics.MergeToSortedMs(perCall));
            var result = new StoreBenchmarkResult(mode, batch, rates, stats);
            results.Add(result);
            output.WriteLine($"{mode} (batch of {batch}): median {result.MedianRate:N0} allocations/s; per call p50 {stats.P50Ms:0.###} ms, p99 {stats.P99Ms:0.###} ms ({stats.Count:N0} calls)");
        }

        return results;
    }

    private async Task<(double Rate, List<long>[] Ticks)> RunOnceAsync(string schema, int batch, TimeSpan length, CancellationToken cancellationToken)
    {
        var store = await createStore(schema);
        try
        {
            const string PoolId = "bench";
            await PoolProvisioning.ProvisionAsync(store, PoolId, new PoolShape(options.Workers, options.Capacity, AllocationStrategy.SkipLocked), cancellationToken);

            // Stop early rather than run the pool full: a full pool measures "no capacity" answers.
            var budget = (long)options.Workers * options.Capacity * 8 / 10;
            long allocated = 0;
            var ticks = Enumerable.Range(0, options.Callers).Select(_ => new List<long>(4096)).ToArray();
            var start = Stopwatch.GetTimestamp();
            var stopAt = start + (long)(length.TotalSeconds * Stopwatch.Frequency);
            await Task.WhenAll(Enumerable.Range(0, options.Callers).Select(caller => Task.Run(
                async () =>
                {
                    var requests = new AllocationRequest[batch];
                    for (long i = 0; Stopwatch.GetTimestamp() < stopAt && Interlocked.Read(ref allocated) + batch <= budget; i++)
                    {
                        for (var r = 0; r < batch; r++)
                        {
                            requests[r] = new AllocationRequest($"{caller}-{i}-{r}");
                        }

                        var callStart = Stopwatch.GetTimestamp();
                        var outcomes = await store.AllocateAsync(PoolId, requests, cancellationToken);
                        ticks[caller].Add(Stopwatch.GetTimestamp() - callStart);
                        Interlocked.Add(ref allocated, outcomes.Count(o => o.Allocation is not null));
                    }
                },
                cancellationToken)));
            var elapsed = Stopwatch.GetElapsedTime(start);
            return (allocated / elapsed.TotalSeconds, ticks);
        }
        finally
        {
            switch (store)
            {
                case IAsyncDisposable asyncDisposable:
                    await asyncDisposable.DisposeAsync();
                    break;
                case IDisposable disposable:
                    disposable.Dispose();
                    break;
            }

            if (removeStore is not null)
            {
                await removeStore(schema);
            }
        }
    }
}
