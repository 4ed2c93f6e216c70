using System.Diagnostics;
using System.Globalization;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Integration;

namespace Allocator.LoadTests.Scenarios;

/// <summary>Which path a scenario's allocations take.</summary>
internal enum DriverKind
{
    /// <summary>One store call per allocation (unbatched).</summary>
    Store,

    /// <summary>Through the pool grain, which coalesces concurrent requests into store batches.</summary>
    PoolGrain,

    /// <summary>Over HTTP through the typed client, against a real host.</summary>
    Http,

    /// <summary>As <see cref="Http"/>, through preferred pools (<c>POST /v1/allocations</c>, the run's pool first, an empty one second): what the key's grain and its reads cost (ADR 0036).</summary>
    HttpPreferred,

    /// <summary>Over HTTP, spread over three host processes that form one Orleans cluster (PostgreSQL only).</summary>
    Cluster,
}

/// <summary>What each step does.</summary>
internal enum StepKind
{
    /// <summary>Allocate one slot and keep it (storms: the pool fills up).</summary>
    Allocate,

    /// <summary>Allocate one slot, then release it (steady state: loopback, sustained).</summary>
    AllocateRelease,

    /// <summary>
    /// Allocate one slot and release it after a random hold, in the background (churn: sessions
    /// of varied length end in any order; the step is the allocation alone).
    /// </summary>
    AllocateHold,
}

/// <summary>A pool to provision: equal workers, one strategy, one placement.</summary>
internal sealed record PoolShape(int Workers, int Capacity, AllocationStrategy Strategy, Placement Placement = Placement.Spread);

/// <summary>
/// The allocation storm: callers allocate from one fresh pool through a driver. Warm-up steps
/// release what they allocate so the measured phase starts on an empty pool.
/// </summary>
internal class AllocationScenario(
    string name,
    StoreProvider stores,
    DriverKind driverKind,
    PoolShape pool,
    StepKind stepKind,
    int maxConnections = 100,
    bool multiplexing = false) : IScenario, IScenarioMetrics, IAuditedScenario
{
    /// <summary>Host processes of the <see cref="DriverKind.Cluster"/> driver.</summary>
    public const int ClusterInstances = 3;

    private StoreSession? _session;
    private IAllocationDriver? _driver;
    private Audit.TableSizeMonitor? _sizes;

    /// <summary>The strategy's path to the service (store, pool grain or HTTP), once initialized.</summary>
    protected IAllocationDriver Driver => _driver ?? throw new InvalidOperationException("Not initialized.");
    private BatchCounter? _batches;
    private Audit.StepCostMeter? _cost;
    private string _poolId = "";
    private string _runId = "";

    // AllocateHold: the releases still to come, and the workers in use, sampled once a second.
    private readonly List<Task> _holds = [];
    private readonly List<int> _inUse = [];
    private CancellationTokenSource? _sampling;
    private Task? _sampler;

    public string Name => name;

    protected AllocationLedger Ledger { get; } = new();

    protected StoreSession Session => _session ?? throw new InvalidOperationException("Not initialized.");

    protected string PoolId => _poolId;

    protected ScenarioContext? Context { get; private set; }

    public virtual async Task InitAsync(ScenarioContext context)
    {
        Context = context;
        _runId = context.RunId;
        _poolId = "pool-" + context.RunId;

        if (multiplexing && stores is not PostgresStoreProvider)
        {
            throw new ScenarioNotWiredException("Npgsql multiplexing is a PostgreSQL connection setting: it needs --store postgres");
        }

        // Fail on a missing driver before provisioning anything.
        var makeDriver = driverKind switch
        {
            DriverKind.Store => store => Task.FromResult<IAllocationDriver>(new StoreDriver(store)),
            DriverKind.PoolGrain => CreatePoolGrainDriver(),
            DriverKind.Http or DriverKind.HttpPreferred => IntegrationHooks.HttpDriver is { } http
                ? async store =>
                {
                    var driver = await http(store, context.CancellationToken);
                    if (driver is HttpDriver calls)
                    {
                        calls.Preferred = driverKind == DriverKind.HttpPreferred;
                    }

                    return driver;
                }
                : throw new ScenarioNotWiredException("not wired yet: needs the HTTP host and typed client (IntegrationHooks.HttpDriver, from Allocator.Host and Allocator.Client)"),
            DriverKind.Cluster => stores is PostgresStoreProvider
                ? _ => ClusterDriver.StartAsync(
                    Session.ConnectionString ?? throw new InvalidOperationException("The session has no connection string."),
                    Session.Schema ?? throw new InvalidOperationException("The session has no schema."),
                    ClusterInstances,
                    maxConnections,
                    context.CancellationToken)
                : throw new ScenarioNotWiredException("a cluster of host processes shares one database: it needs --store postgres"),
            _ => throw new ArgumentOutOfRangeException(nameof(driverKind), driverKind, "Unknown driver."),
        };

        _session = await stores.OpenAsync(new StoreSessionOptions(context.RunId, context.Rtt, maxConnections, multiplexing, context.Jitter), context.CancellationToken);
        await PoolProvisioning.ProvisionAsync(_session.Store, _poolId, pool, context.CancellationToken);
        if (driverKind == DriverKind.HttpPreferred)
        {
            // The pool named second (HttpDriver.SecondPool): empty, so the first always answers,
            // but the key's grain reads the key in both before it allocates.
            await _session.Store.UpsertPoolAsync(HttpDriver.SecondPool(_poolId), PoolSettings.Default, context.CancellationToken);
        }

        _driver = await makeDriver(_session.Store);
        if (context.Workload == "sustained" && _session.ConnectionString is { } connectionString && _session.Schema is { } schema)
        {
            // Minute by minute: does the hot table stay small, does vacuum keep up?
            _sizes = Audit.TableSizeMonitor.Start(connectionString, schema, $"{context.Workload}/{name}", Console.Out, context.Time);
        }

        if (driverKind is DriverKind.PoolGrain or DriverKind.Http or DriverKind.HttpPreferred) // (a cluster's batches happen in other processes)
        {
            _batches = new BatchCounter();
        }

        if (_session.ConnectionString is { } database && _session.Schema is { } runSchema)
        {
            _cost = await Audit.StepCostMeter.CreateAsync(database, runSchema, context.CancellationToken);
        }

        if (stepKind == StepKind.AllocateHold)
        {
            _sampling = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken);
            _sampler = SampleWorkersInUseAsync(_session.Store, _sampling.Token);
        }
    }

    /// <summary>Workers with at least one slot in use, once a second, until the run's metrics are collected.</summary>
    private async Task SampleWorkersInUseAsync(IWorkerStore store, CancellationToken cancellationToken)
    {
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(1), Context?.Time ?? TimeProvider.System);
        try
        {
            while (await timer.WaitForNextTickAsync(cancellationToken))
            {
                var workers = await store.GetWorkersAsync(_poolId, cancellationToken);
                lock (_inUse)
                {
                    _inUse.Add(workers.Count(w => w.Load > 0));
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
        }
    }

    /// <summary>Releases <paramref name="allocation"/> after a session's length: exponential, 1 s on average, at most 5 s.</summary>
    private async Task HoldThenReleaseAsync(IAllocationDriver driver, Allocation allocation)
    {
        var hold = TimeSpan.FromSeconds(Math.Min(5, -Math.Log(1 - Random.Shared.NextDouble())));
        await Task.Delay(hold, Context?.Time ?? TimeProvider.System);
        var released = await driver.ReleaseAsync(_poolId, allocation.AllocationId, allocation.Epoch, CancellationToken.None);
        if (released.Status == LeaseStatus.Ok)
        {
            Ledger.RecordRelease(allocation.AllocationId);
        }
    }

    private async Task WaitForHoldsAsync()
    {
        Task[] holds;
        lock (_holds)
        {
            holds = [.. _holds];
        }

        await Task.WhenAll(holds);
    }

    public virtual async Task<StepResult> StepAsync(StepInfo step, CancellationToken cancellationToken)
    {
        var driver = _driver ?? throw new InvalidOperationException("Not initialized.");
        if (!step.IsWarmUp)
        {
            _batches?.MarkMeasuredStart();
            _cost?.CountStep();
        }

        var request = new AllocationRequest($"{_runId}-{step.CallerIndex}-{step.Iteration}");
        var outcome = await driver.AllocateAsync(_poolId, request, cancellationToken);
        if (outcome.Allocation is not { } allocation)
        {
            return StepResult.Fail(ErrorKinds.NoCapacity);
        }

        if (step.IsWarmUp || stepKind == StepKind.AllocateRelease)
        {
            var released = await driver.ReleaseAsync(_poolId, allocation.AllocationId, allocation.Epoch, cancellationToken);
            if (released.Status != LeaseStatus.Ok)
            {
                return StepResult.Fail("release-" + released.Status.ToString().ToLowerInvariant());
            }

            if (!step.IsWarmUp)
            {
                Ledger.RecordReply(outcome);
                Ledger.RecordRelease(allocation.AllocationId);
            }

            return StepResult.Ok();
        }

        Ledger.RecordReply(outcome);
        if (stepKind == StepKind.AllocateHold)
        {
            var hold = HoldThenReleaseAsync(driver, allocation);
            lock (_holds)
            {
                _holds.Add(hold);
            }
        }

        return StepResult.Ok();
    }

    public virtual async Task<IReadOnlyList<ScenarioMetric>> CollectMetricsAsync(CancellationToken cancellationToken)
    {
        // First, before the reads below add work of their own.
        var cost = _cost is { } meter ? await meter.StopAsync() : [];
        var inUse = await StopSamplingAsync();
        if (_sizes is { } sizes)
        {
            _sizes = null;
            await sizes.DisposeAsync(); // the last report: sizes at the end of the run
        }

        var statistics = await Session.Store.GetPoolStatisticsAsync(_poolId, cancellationToken);
        List<ScenarioMetric> metrics =
        [
            new ScenarioMetric(MetricNames.LoadSpread, statistics.LoadSpread, "slots"),
            new ScenarioMetric("utilization", statistics.Utilization * 100, "%"),
        ];
        if (inUse.Length > 0)
        {
            // Churn (issue 49): how many workers the placement kept busy; the rest could be scaled down.
            var sorted = inUse.Order().Select(v => (double)v).ToArray();
            metrics.Add(new ScenarioMetric("workers in use p50", LatencyStatistics.Percentile(sorted, 0.50), "workers"));
            metrics.Add(new ScenarioMetric("workers in use max", sorted[^1], "workers"));
            metrics.Add(new ScenarioMetric("workers in use mean", sorted.Average(), "workers"));
            Console.Out.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{Context?.Workload}/{name}: workers in use, every 5 s: {string.Join(", ", inUse.Where((_, i) => i % 5 == 4))}"));
        }

        if (driverKind is not (DriverKind.Http or DriverKind.HttpPreferred))
        {
            // The decision (rank, excess) is on the trace, not on the HTTP answer: no figure over HTTP.
            metrics.Add(new ScenarioMetric(MetricNames.MeanExcess, Ledger.MeanExcessLoadIndex(), "load-index points"));
        }

        if (_batches is { } batches)
        {
            metrics.Add(new ScenarioMetric("store batches (measured phase)", batches.Batches, "batches"));
            metrics.Add(new ScenarioMetric("requests per batch (mean)", batches.Batches == 0 ? 0 : (double)batches.Requests / batches.Batches, "requests"));
            metrics.Add(new ScenarioMetric("batches of one request", batches.Batches == 0 ? 0 : 100.0 * batches.Singles / batches.Batches, "%"));
            // Store time per batch against the callers' response time: the difference is time
            // spent queued in the grain for a free batch slot (or in HTTP).
            var durations = batches.SortedDurations();
            if (durations.Length > 0)
            {
                metrics.Add(new ScenarioMetric("store time per batch p50", LatencyStatistics.Percentile(durations, 0.50), "ms"));
                metrics.Add(new ScenarioMetric("store time per batch p99", LatencyStatistics.Percentile(durations, 0.99), "ms"));
            }

            // A caller's time inside the pool grain, and the part of it before its batch started;
            // over HTTP also each request as Kestrel and as the client timed it: server time minus
            // grain time is the endpoint and Orleans' messaging, client time minus server time the
            // sockets and the client (wide-250: 272 / 275 / 281 ms at the median).
            if (batches.SortedGrainTimes() is { Length: > 0 } grainTimes)
            {
                metrics.Add(new ScenarioMetric("grain time per allocation p50", LatencyStatistics.Percentile(grainTimes, 0.50), "ms"));
            }

            if (batches.SortedServerTimes() is { Length: > 0 } serverTimes)
            {
                metrics.Add(new ScenarioMetric("HTTP server time per request p50", LatencyStatistics.Percentile(serverTimes, 0.50), "ms"));
            }

            if (batches.SortedClientTimes() is { Length: > 0 } clientTimes)
            {
                metrics.Add(new ScenarioMetric("HTTP client time per request p50", LatencyStatistics.Percentile(clientTimes, 0.50), "ms"));
            }

            if (batches.SortedQueueWaits() is { Length: > 0 } queueWaits)
            {
                metrics.Add(new ScenarioMetric("queue wait per allocation p50", LatencyStatistics.Percentile(queueWaits, 0.50), "ms"));
            }

            // Part of that wait: batches of every kind in line for one of the silo's store slots
            // (the database connections the grains may use; docs/decisions/0025).
            var slotWaits = batches.SortedSlotWaits();
            metrics.Add(new ScenarioMetric("store batches that waited for a slot", slotWaits.Length, "batches"));
            if (slotWaits.Length > 0)
            {
                metrics.Add(new ScenarioMetric("store slot wait p50", LatencyStatistics.Percentile(slotWaits, 0.50), "ms"));
            }
        }

        if (Session.Proxy is { } proxy && !double.IsNaN(proxy.LatenessMs(0.5)))
        {
            // How faithfully the proxy kept the injected latency (sending side).
            metrics.Add(new ScenarioMetric("proxy: chunk lateness p50", proxy.LatenessMs(0.5), "ms"));
            metrics.Add(new ScenarioMetric("proxy: chunk lateness p99", proxy.LatenessMs(0.99), "ms"));
        }

        metrics.AddRange(cost);
        return metrics;
    }

    public async Task<AuditResult> AuditAsync(CancellationToken cancellationToken)
    {
        await WaitForHoldsAsync();
        return await Session.Audit(_poolId, Ledger, cancellationToken);
    }

    /// <summary>Waits for the sessions still held to end, stops the sampler and returns its samples (none unless churning).</summary>
    private async Task<int[]> StopSamplingAsync()
    {
        if (_sampler is null)
        {
            return [];
        }

        await _sampling!.CancelAsync();
        await _sampler;
        _sampler = null;
        _sampling.Dispose();
        await WaitForHoldsAsync();
        lock (_inUse)
        {
            return [.. _inUse];
        }
    }

    public virtual async Task CleanAsync()
    {
        await StopSamplingAsync();
        await WaitForHoldsAsync();
        if (_sizes is { } sizes)
        {
            _sizes = null;
            await sizes.DisposeAsync();
        }

        _batches?.Dispose();
        if (_driver is not null)
        {
            await _driver.DisposeAsync();
        }

        if (_session is not null)
        {
            await _session.DisposeAsync();
        }
    }

    private static Func<IWorkerStore, Task<IAllocationDriver>> CreatePoolGrainDriver()
    {
        var hook = IntegrationHooks.RequirePoolGrainDriver();
        return store => hook(store);
    }
}

/// <summary>Creates a pool of equal workers in registration batches.</summary>
internal static class PoolProvisioning
{
    public const int RegistrationBatch = 5_000;

    public static async Task ProvisionAsync(IWorkerStore store, string poolId, PoolShape shape, CancellationToken cancellationToken)
    {
        await store.UpsertPoolAsync(poolId, PoolSettings.Default with { Strategy = shape.Strategy, Placement = shape.Placement }, cancellationToken);
        for (var first = 0; first < shape.Workers; first += RegistrationBatch)
        {
            var batch = Enumerable.Range(first, Math.Min(RegistrationBatch, shape.Workers - first))
                .Select(i => Worker(i, shape.Capacity))
                .ToList();
            await store.RegisterWorkersAsync(poolId, batch, cancellationToken);
        }
    }

    public static WorkerRegistration Worker(int index, int capacity) =>
        new($"w{index:D6}", $"10.{index / 65536 % 256}.{index / 256 % 256}.{index % 256}:7000", capacity);
}

/// <summary>
/// reg-storm: the allocation storm while a registration storm runs alongside (new workers
/// registering one by one from several registrants, each through the strategy's own path: the
/// pool's registration batcher for the batched strategy, one statement each for unbatched).
/// Reports how the registrations fared.
/// </summary>
internal sealed class RegistrationStormScenario(
    string name,
    StoreProvider stores,
    DriverKind driver,
    PoolShape shape,
    int registrations,
    TimeSpan over,
    int registrants) : AllocationScenario(name, stores, driver, shape, StepKind.Allocate)
{
    private readonly PoolShape _shape = shape;
    private readonly List<long> _registrationTicks = [];
    private CancellationTokenSource? _stop;
    private Task? _storm;
    private TimeSpan _stormElapsed;

    public override async Task InitAsync(ScenarioContext context)
    {
        await base.InitAsync(context);
        _stop = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken);
        _storm = RunStormAsync(_stop.Token);
    }

    public override async Task<IReadOnlyList<ScenarioMetric>> CollectMetricsAsync(CancellationToken cancellationToken)
    {
        if (_storm is not null)
        {
            await _storm;
        }

        var metrics = (await base.CollectMetricsAsync(cancellationToken)).ToList();
        double[] sorted;
        lock (_registrationTicks)
        {
            sorted = LatencyStatistics.MergeToSortedMs([_registrationTicks]);
        }

        metrics.Add(new ScenarioMetric("registrations", sorted.Length, "workers"));
        metrics.Add(new ScenarioMetric("registration storm", _stormElapsed.TotalSeconds, "s"));
        metrics.Add(new ScenarioMetric("registration p99", LatencyStatistics.Percentile(sorted, 0.99), "ms"));
        return metrics;
    }

    public override async Task CleanAsync()
    {
        if (_stop is not null)
        {
            await _stop.CancelAsync();
            if (_storm is not null)
            {
                await _storm.ContinueWith(_ => { }, TaskScheduler.Default);
            }

            _stop.Dispose();
        }

        await base.CleanAsync();
    }

    /// <summary>Registers <c>registrations</c> new workers spread evenly over <c>over</c>.</summary>
    private async Task RunStormAsync(CancellationToken cancellationToken)
    {
        var started = Stopwatch.GetTimestamp();
        var perRegistrant = (registrations + registrants - 1) / registrants;
        var interval = over / Math.Max(1, perRegistrant);
        var time = Context!.Time;
        await Task.WhenAll(Enumerable.Range(0, registrants).Select(async r =>
        {
            for (var i = 0; i < perRegistrant && !cancellationToken.IsCancellationRequested; i++)
            {
                var index = _shape.Workers + (r * perRegistrant) + i;
                if (index >= _shape.Workers + registrations)
                {
                    break;
                }

                var due = started + (long)((i * interval).TotalSeconds * Stopwatch.Frequency);
                var wait = Stopwatch.GetElapsedTime(Stopwatch.GetTimestamp(), due);
                if (wait > TimeSpan.Zero)
                {
                    await Task.Delay(wait, time, cancellationToken);
                }

                var start = Stopwatch.GetTimestamp();
                await Driver.RegisterAsync(PoolId, PoolProvisioning.Worker(index, _shape.Capacity), cancellationToken);
                var elapsed = Stopwatch.GetTimestamp() - start;
                lock (_registrationTicks)
                {
                    _registrationTicks.Add(elapsed);
                }
            }
        }));
        _stormElapsed = Stopwatch.GetElapsedTime(started);
    }
}
