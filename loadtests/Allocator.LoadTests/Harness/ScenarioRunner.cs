using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading.Channels;

namespace Allocator.LoadTests.Harness;

/// <summary>
/// Runs one scenario under a load model: init, warm-up, measured phase, metrics, audit, clean.
/// Every measured response time is kept (one list per caller, merged at the end) so the
/// percentiles are exact.
/// </summary>
internal sealed class ScenarioRunner(TimeProvider time, TextWriter progress)
{
    /// <summary>How often progress is shown.</summary>
    public TimeSpan ProgressInterval { get; init; } = TimeSpan.FromSeconds(1);

    /// <summary>Where progress is shown while a run runs: a live table on a terminal, else a line per interval on the progress writer.</summary>
    public IProgressDisplay? Display { get; init; }

    public async Task<RunResult> RunAsync(IScenario scenario, ScenarioContext context, LoadModel model, RunLimits limits)
    {
        limits.Validate();
        var cancellationToken = context.CancellationToken;
        try
        {
            await scenario.InitAsync(context);
            var state = new RunState(model.Callers, limits);
            using var stopProgress = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            var progressTask = ReportProgressAsync($"{context.Workload}/{scenario.Name}", state, limits, stopProgress.Token);
            try
            {
                await (model switch
                {
                    ClosedModel closed => RunClosedAsync(scenario, closed, state, cancellationToken),
                    OpenModel open => RunOpenAsync(scenario, open, state, cancellationToken),
                    _ => throw new ArgumentOutOfRangeException(nameof(model), model, "Unknown load model."),
                });
            }
            finally
            {
                await stopProgress.CancelAsync();
                await progressTask;
            }

            state.Finish();
            var metrics = scenario is IScenarioMetrics m ? await m.CollectMetricsAsync(cancellationToken) : [];
            var audit = scenario is IAuditedScenario a ? await a.AuditAsync(cancellationToken) : null;
            var sorted = LatencyStatistics.MergeToSortedMs(state.Latencies);
            var result = new RunResult
            {
                Workload = context.Workload,
                Scenario = scenario.Name,
                Model = model.Describe(),
                Callers = model.Callers,
                Rtt = context.Rtt,
                Limits = limits.Describe(),
                Steps = state.MeasuredSteps,
                Allocations = state.MeasuredAllocations,
                FailedSteps = state.FailedSteps,
                ErrorsByKind = state.Errors.ToDictionary(kv => kv.Key, kv => kv.Value),
                Elapsed = state.MeasuredElapsed,
                Latency = LatencyStatistics.FromSorted(sorted),
                SortedLatenciesMs = sorted,
                TimeTo10kMeasured = state.TimeTo10k,
                AllocationsPerSecond = state.PerSecond,
                Metrics = metrics,
                Audit = audit,
            };
            progress.WriteLine($"[{context.Workload}/{scenario.Name}] done: {result.Allocations:N0} allocations in {result.Elapsed.TotalSeconds:0.0} s, {result.Throughput:N0}/s, p50 {result.Latency.P50Ms:0.0} ms, p99 {result.Latency.P99Ms:0.0} ms, errors {result.FailedSteps:N0}");
            return result;
        }
        catch (ScenarioNotWiredException e)
        {
            progress.WriteLine($"[{context.Workload}/{scenario.Name}] not run: {e.Message}");
            return RunResult.Failed(context.Workload, scenario.Name, model, context.Rtt, limits, e.Message);
        }
        catch (Exception e) when (e is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            // Setup, metrics or the audit itself failed: no figures, and the run must not pass.
            progress.WriteLine($"[{context.Workload}/{scenario.Name}] failed: {e}");
            return RunResult.Failed(context.Workload, scenario.Name, model, context.Rtt, limits, $"failed: {e.GetType().Name}: {e.Message}");
        }
        finally
        {
            await scenario.CleanAsync();
        }
    }

    private static async Task RunClosedAsync(IScenario scenario, ClosedModel model, RunState state, CancellationToken cancellationToken)
    {
        var callers = new Task[model.Callers];
        for (var c = 0; c < callers.Length; c++)
        {
            var callerIndex = c;
            callers[c] = Task.Run(
                async () =>
                {
                    long iteration = 0;
                    while (!cancellationToken.IsCancellationRequested)
                    {
                        var start = Stopwatch.GetTimestamp();
                        if (!state.TryClaim(start))
                        {
                            break;
                        }

                        await state.ExecuteStepAsync(scenario, callerIndex, iteration++, start, cancellationToken);
                    }
                },
                CancellationToken.None);
        }

        await Task.WhenAll(callers);
    }

    private async Task RunOpenAsync(IScenario scenario, OpenModel model, RunState state, CancellationToken cancellationToken)
    {
        // A step runs in a free slot; the slot index is the step's caller index, so each
        // per-slot latency list has one writer at a time.
        var slots = Channel.CreateBounded<int>(model.MaxInFlight);
        for (var s = 0; s < model.MaxInFlight; s++)
        {
            slots.Writer.TryWrite(s);
        }

        var running = new ConcurrentDictionary<long, Task>();
        var ticksPerStep = Stopwatch.Frequency / model.RatePerSecond;
        var origin = Stopwatch.GetTimestamp();
        long iteration = 0;
        while (!cancellationToken.IsCancellationRequested)
        {
            var due = origin + (long)(iteration * ticksPerStep);
            var wait = Stopwatch.GetElapsedTime(Stopwatch.GetTimestamp(), due);
            if (wait > TimeSpan.FromMilliseconds(1))
            {
                // Timer resolution is about a millisecond: sleep, then issue every step now due.
                await Task.Delay(wait, time, cancellationToken).ContinueWith(_ => { }, TaskScheduler.Default);
                continue;
            }

            int slot;
            try
            {
                slot = await slots.Reader.ReadAsync(cancellationToken);
            }
            catch (OperationCanceledException)
            {
                break;
            }

            // The phase (warm-up or measured) and the stop rule go by when the step really starts:
            // when the service falls behind the schedule, going by the scheduled time would count
            // the whole backlog of steps scheduled during the warm-up as warm-up, however late they run.
            var started = Stopwatch.GetTimestamp();
            if (!state.TryClaim(started))
            {
                slots.Writer.TryWrite(slot);
                break;
            }

            var n = iteration++;
            var task = Task.Run(
                async () =>
                {
                    try
                    {
                        // Timed from the scheduled start: waiting for a slot is part of the answer time.
                        await state.ExecuteStepAsync(scenario, slot, n, due, cancellationToken, phaseTimestamp: started);
                    }
                    finally
                    {
                        slots.Writer.TryWrite(slot);
                    }
                },
                CancellationToken.None);
            running[n] = task;
            _ = task.ContinueWith(t => running.TryRemove(n, out _), TaskScheduler.Default);
        }

        await Task.WhenAll(running.Values);
    }

    private Task ReportProgressAsync(string label, RunState state, RunLimits limits, CancellationToken cancellationToken) =>
        (Display ?? new TextProgressDisplay(progress)).ShowAsync(async show =>
        {
            using var timer = new PeriodicTimer(ProgressInterval, time);
            long lastAllocations = 0;
            var lastTimestamp = Stopwatch.GetTimestamp();
            List<double> interval = [];
            try
            {
                while (await timer.WaitForNextTickAsync(cancellationToken))
                {
                    var now = Stopwatch.GetTimestamp();
                    var allocations = state.MeasuredAllocations;
                    var rate = (allocations - lastAllocations) / Stopwatch.GetElapsedTime(lastTimestamp, now).TotalSeconds;
                    lastAllocations = allocations;
                    lastTimestamp = now;
                    interval.Clear();
                    while (state.Recent.TryDequeue(out var ticks))
                    {
                        interval.Add(ticks * 1000.0 / Stopwatch.Frequency);
                    }

                    interval.Sort();
                    show(new ProgressSnapshot(
                        label,
                        allocations,
                        limits.Allocations,
                        rate,
                        interval.Count == 0 ? double.NaN : LatencyStatistics.Percentile(interval, 0.50),
                        interval.Count == 0 ? double.NaN : LatencyStatistics.Percentile(interval, 0.99),
                        state.FailedSteps,
                        state.ElapsedSinceStart,
                        state.InWarmUp));
                }
            }
            catch (OperationCanceledException)
            {
                // The run is over.
            }
        });

    /// <summary>Counters and recordings shared by the callers of one run.</summary>
    private sealed class RunState
    {
        private readonly RunLimits _limits;
        private readonly long _startTimestamp;
        private readonly long _measureFromTimestamp;
        private readonly long? _stopAtTimestamp;
        private long _measuredSteps;
        private long _claimedSteps;
        private readonly long[] _perSecond;
        private long _measuredAllocations;
        private long _failedSteps;
        private long _lastAnswerTimestamp;
        private long _timeTo10kTicks = -1;
        private volatile bool _stop;

        public RunState(int callers, RunLimits limits)
        {
            _limits = limits;
            Latencies = [.. Enumerable.Range(0, callers).Select(_ => new List<long>(1024))];
            _startTimestamp = Stopwatch.GetTimestamp();
            _measureFromTimestamp = _startTimestamp + (long)(limits.WarmUp.TotalSeconds * Stopwatch.Frequency);
            _lastAnswerTimestamp = _measureFromTimestamp;
            _stopAtTimestamp = limits.Duration is { } d ? _measureFromTimestamp + (long)(d.TotalSeconds * Stopwatch.Frequency) : null;
            _perSecond = new long[limits.Duration is { } cap ? (int)Math.Ceiling(cap.TotalSeconds) + 5 : 24 * 3600];
        }

        /// <summary>Allocations answered in each second of the measured phase.</summary>
        public long[] PerSecond => _perSecond[..Math.Min(_perSecond.Length, (int)Math.Ceiling(MeasuredElapsed.TotalSeconds))];

        public List<long>[] Latencies { get; }

        public ConcurrentDictionary<string, long> Errors { get; } = new(StringComparer.Ordinal);

        /// <summary>Response times (ticks) of measured steps since the progress display last took them.</summary>
        public ConcurrentQueue<long> Recent { get; } = new();

        public long MeasuredSteps => Interlocked.Read(ref _measuredSteps);

        public long MeasuredAllocations => Interlocked.Read(ref _measuredAllocations);

        public long FailedSteps => Interlocked.Read(ref _failedSteps);

        public bool InWarmUp => Stopwatch.GetTimestamp() < _measureFromTimestamp;

        public TimeSpan ElapsedSinceStart => Stopwatch.GetElapsedTime(_startTimestamp);

        public TimeSpan MeasuredElapsed { get; private set; }

        public TimeSpan? TimeTo10k => _timeTo10kTicks < 0 ? null : TimeSpan.FromSeconds((double)_timeTo10kTicks / Stopwatch.Frequency);

        public bool ShouldStop
        {
            get
            {
                if (_stop)
                {
                    return true;
                }

                if ((_limits.Allocations is { } n && MeasuredAllocations >= n)
                    || (_stopAtTimestamp is { } at && Stopwatch.GetTimestamp() >= at))
                {
                    _stop = true;
                }

                return _stop;
            }
        }

        /// <summary>
        /// Claims one step starting at <paramref name="startTimestamp"/>. With a count limit,
        /// exactly that many measured steps are claimed (one allocation each), so a pool sized
        /// for the run is never overrun by callers still in flight.
        /// </summary>
        public bool TryClaim(long startTimestamp)
        {
            if (ShouldStop)
            {
                return false;
            }

            if (startTimestamp < _measureFromTimestamp || _limits.Allocations is not { } n)
            {
                return true;
            }

            if (Interlocked.Increment(ref _claimedSteps) > n)
            {
                _stop = true;
                return false;
            }

            return true;
        }

        /// <param name="startTimestamp">Latency is measured from here (open model: the scheduled start).</param>
        /// <param name="phaseTimestamp">Decides warm-up or measured (open model: the actual start); default <paramref name="startTimestamp"/>.</param>
        public async Task ExecuteStepAsync(IScenario scenario, int callerIndex, long iteration, long startTimestamp, CancellationToken cancellationToken, long? phaseTimestamp = null)
        {
            var measured = (phaseTimestamp ?? startTimestamp) >= _measureFromTimestamp;
            StepResult result;
            try
            {
                result = await scenario.StepAsync(new StepInfo(callerIndex, iteration, !measured), cancellationToken);
            }
            catch (ScenarioNotWiredException)
            {
                _stop = true;
                throw;
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return;
            }
            catch (Exception e)
            {
                result = StepResult.Fail(ErrorKinds.Of(e));
            }

            var end = Stopwatch.GetTimestamp();
            if (!measured)
            {
                return;
            }

            Latencies[callerIndex].Add(end - startTimestamp);
            Recent.Enqueue(end - startTimestamp);
            Interlocked.Increment(ref _measuredSteps);
            InterlockedMax(ref _lastAnswerTimestamp, end);
            if (result.ErrorKind is { } kind)
            {
                Interlocked.Increment(ref _failedSteps);
                Errors.AddOrUpdate(kind, 1, (_, v) => v + 1);
                return;
            }

            var second = (int)Math.Min(_perSecond.Length - 1, (end - _measureFromTimestamp) / Stopwatch.Frequency);
            Interlocked.Add(ref _perSecond[second], result.Allocations);
            var before = Interlocked.Add(ref _measuredAllocations, result.Allocations) - result.Allocations;
            if (before < RunResult.TenThousand && before + result.Allocations >= RunResult.TenThousand)
            {
                Interlocked.Exchange(ref _timeTo10kTicks, end - _measureFromTimestamp);
            }
        }

        public void Finish() =>
            MeasuredElapsed = Stopwatch.GetElapsedTime(_measureFromTimestamp, Math.Max(_measureFromTimestamp, Interlocked.Read(ref _lastAnswerTimestamp)));

        private static void InterlockedMax(ref long target, long value)
        {
            var current = Interlocked.Read(ref target);
            while (value > current)
            {
                var seen = Interlocked.CompareExchange(ref target, value, current);
                if (seen == current)
                {
                    return;
                }

                current = seen;
            }
        }
    }
}

/// <summary>Stable, short error kinds for exceptions thrown by steps.</summary>
internal static class ErrorKinds
{
    public const string NoCapacity = "no-capacity";

    public static string Of(Exception e) => e switch
    {
        AllocatorException a => "allocator-" + a.Kind.ToString().ToLowerInvariant(),
        TimeoutException => "timeout",
        OperationCanceledException => "cancelled",
        _ when e.GetType().Name == "PostgresException" && e.GetType().GetProperty("SqlState")?.GetValue(e) is string state => "sqlstate-" + state,
        _ => e.GetType().Name,
    };
}
