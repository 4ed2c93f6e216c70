using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Workloads;

/// <summary>Sizes of one workload: the full run, or the <c>--quick</c> one.</summary>
/// <param name="Callers">Closed model: callers. Open model: the in-flight limit.</param>
/// <param name="Rate">Open model only: steps started per second, whatever the answers.</param>
/// <param name="Allocations">Stop after this many measured allocations (null: by time only).</param>
/// <param name="Duration">Stop after this long (with a count, a safety cap).</param>
internal sealed record WorkloadSize(int Workers, int Capacity, int Callers, double? Rate, long? Allocations, TimeSpan Duration, TimeSpan WarmUp);

/// <summary>One strategy of a workload, run side by side with the others.</summary>
/// <param name="Workers">Overrides the workload's pool size (big-pool compares sizes).</param>
/// <param name="MaxDuration">Caps this strategy's run (full, quick): the baseline is slow enough that its time to 10,000 is extrapolated.</param>
/// <param name="Placement">The pool's placement (issue 49): spread (the least-loaded first) or pack.</param>
internal sealed record StrategyVariant(string Label, DriverKind Driver, AllocationStrategy Strategy, bool Multiplexing = false, bool Baseline = false, int? Workers = null, (TimeSpan Full, TimeSpan Quick)? MaxDuration = null, Placement Placement = Placement.Spread);

/// <summary>A benchmark workload (DESIGN.md, "The benchmark workloads").</summary>
/// <param name="MaxConnections">The service's database connection limit.</param>
/// <param name="Registrations">reg-storm: workers registering during the run, and over how long.</param>
internal sealed record WorkloadDefinition(
    string Name,
    string Question,
    TimeSpan Rtt,
    int MaxConnections,
    StepKind Step,
    WorkloadSize Full,
    WorkloadSize Quick,
    IReadOnlyList<StrategyVariant> Strategies,
    (int Workers, TimeSpan Over, int QuickWorkers, TimeSpan QuickOver)? Registrations = null)
{
    public WorkloadSize Size(bool quick) => quick ? Quick : Full;
}

/// <summary>Every workload in one table: pool size, callers, RTT, run length and quick sizes.</summary>
internal static class WorkloadCatalogue
{
    public static readonly StrategyVariant Batched = new("skip-locked batched (pool grain)", DriverKind.PoolGrain, AllocationStrategy.SkipLocked);
    /// <summary>The service as deployed: the host in-process on Kestrel, called through Allocator.Client, its pool grains batching onto the store.</summary>
    public static readonly StrategyVariant BatchedHttp = new("skip-locked batched (HTTP → host → pool grain)", DriverKind.Http, AllocationStrategy.SkipLocked);
    /// <summary>Three host processes, one Orleans cluster on one database, callers spread over them.</summary>
    public static readonly StrategyVariant BatchedCluster = new("skip-locked batched, 3 host processes (HTTP → any instance → one pool grain)", DriverKind.Cluster, AllocationStrategy.SkipLocked);
    public static readonly StrategyVariant Unbatched = new("skip-locked unbatched", DriverKind.Store, AllocationStrategy.SkipLocked);
    public static readonly StrategyVariant Strict = new("strict", DriverKind.Store, AllocationStrategy.Strict);
    public static readonly StrategyVariant Baseline = new("baseline: interactive transaction", DriverKind.Store, AllocationStrategy.Strict, Baseline: true, MaxDuration: (TimeSpan.FromSeconds(120), TimeSpan.FromSeconds(10)));
    public static readonly StrategyVariant Multiplexed = new("skip-locked unbatched, Npgsql multiplexing", DriverKind.Store, AllocationStrategy.SkipLocked, Multiplexing: true);

    public static readonly StrategyVariant BatchedPack = Batched with { Label = "skip-locked batched, pack (pool grain)", Placement = Placement.Pack };
    public static readonly StrategyVariant BatchedHttpPack = BatchedHttp with { Label = "skip-locked batched, pack (HTTP → host → pool grain)", Placement = Placement.Pack };
    /// <summary>As <see cref="BatchedHttp"/>, each allocation through preferred pools naming the pool and an empty one after it (ADR 0036): the key's grain and its reads of the key in both pools.</summary>
    public static readonly StrategyVariant BatchedHttpPreferred = BatchedHttp with { Label = "skip-locked batched, preferred pools of 2 (HTTP → key grain → pool grain)", Driver = DriverKind.HttpPreferred };
    public static readonly StrategyVariant UnbatchedPack = Unbatched with { Label = "skip-locked unbatched, pack", Placement = Placement.Pack };

    private static readonly TimeSpan Ms90 = TimeSpan.FromMilliseconds(90);
    private static readonly TimeSpan Ms250 = TimeSpan.FromMilliseconds(250);
    private static TimeSpan S(double seconds) => TimeSpan.FromSeconds(seconds);

    public static IReadOnlyList<WorkloadDefinition> All { get; } =
    [
        //   name         question                                                    RTT          conns step                     full: workers cap callers rate allocations duration warm-up          quick
        new("storm-90", "the published broker figure at 90 ms (limit 533/s)", Ms90, 100, StepKind.Allocate,
            new WorkloadSize(100, 100, 48, null, 10_000, S(1200), S(3)), new WorkloadSize(100, 100, 48, null, 1_000, S(30), S(1)),
            [BatchedHttp, BatchedHttpPack, BatchedHttpPreferred, Unbatched, UnbatchedPack, Strict, Baseline]),
        new("storm-250", "the same at 250 ms (limit 192/s)", Ms250, 100, StepKind.Allocate,
            new WorkloadSize(100, 100, 48, null, 10_000, S(1200), S(3)), new WorkloadSize(100, 100, 48, null, 500, S(30), S(1)),
            [BatchedHttp, Unbatched, Strict, Baseline]),
        // wide-250 stops at 90,000 allocations if it gets there before 60 s: the pool has 100,000 slots.
        new("wide-250", "what batching buys: 1,000 callers, at most 16 DB connections", Ms250, 16, StepKind.Allocate,
            new WorkloadSize(1_000, 100, 1_000, 4_000, 90_000, S(60), S(5)), new WorkloadSize(100, 100, 200, 800, null, S(8), S(1)),
            [BatchedHttp, Unbatched, Multiplexed]),
        new("loopback", "raw throughput on this machine (allocate + release)", TimeSpan.Zero, 100, StepKind.AllocateRelease,
            new WorkloadSize(1_000, 100, 64, null, null, S(60), S(5)), new WorkloadSize(1_000, 100, 64, null, null, S(8), S(1)),
            [Batched, BatchedPack, Unbatched, UnbatchedPack, Strict, Baseline]),
        new("big-pool", "cost growth with pool size (100 vs 100,000 workers)", TimeSpan.Zero, 100, StepKind.AllocateRelease,
            new WorkloadSize(100_000, 100, 48, null, null, S(60), S(5)), new WorkloadSize(10_000, 100, 48, null, null, S(8), S(1)),
            [Unbatched with { Label = "skip-locked unbatched, 100 workers", Workers = 100 }, Unbatched with { Label = "skip-locked unbatched, full pool" },
             Batched with { Label = "skip-locked batched, 100 workers", Workers = 100 }, Batched with { Label = "skip-locked batched, full pool" }]),
        new("reg-storm", "registration storms do not stall allocation", Ms90, 100, StepKind.Allocate,
            new WorkloadSize(100, 100, 48, null, null, S(12), S(0)), new WorkloadSize(100, 100, 48, null, null, S(6), S(0)),
            [Batched, Unbatched],
            Registrations: (10_000, S(10), 1_000, S(5))),
        new("sustained", "no decay as dead tuples pile up (allocate + release)", TimeSpan.Zero, 100, StepKind.AllocateRelease,
            new WorkloadSize(1_000, 100, 64, null, null, S(600), S(5)), new WorkloadSize(1_000, 100, 64, null, null, S(20), S(1)),
            [Batched, Unbatched]),
        new("cluster", "three instances, one cluster, one pool: storm-90 through all of them", Ms90, 100, StepKind.Allocate,
            new WorkloadSize(100, 100, 48, null, 10_000, S(1200), S(3)), new WorkloadSize(100, 100, 48, null, 1_000, S(30), S(1)),
            [BatchedCluster, BatchedHttp]),
        // churn: 200 sessions a second held 1 s on average (exponential, at most 5 s) on 100 workers
        // of 8 slots: about 200 of 800 slots in use. Spread puts them on nearly every worker; pack on
        // about a quarter, which an autoscaler could power the rest of off (issue 49).
        new("churn", "workers in use under churn: spread against pack (sessions of varied length)", TimeSpan.Zero, 100, StepKind.AllocateHold,
            new WorkloadSize(100, 8, 400, 200, null, S(120), S(5)), new WorkloadSize(100, 8, 400, 200, null, S(20), S(2)),
            [Batched, BatchedPack]),
        new("http", "issue 4: the service over HTTP, 48 callers, local PostgreSQL (allocate + release)", TimeSpan.Zero, 100, StepKind.AllocateRelease,
            new WorkloadSize(1_000, 100, 48, null, null, S(20), S(3)), new WorkloadSize(1_000, 100, 48, null, null, S(5), S(1)),
            [BatchedHttp]),
    ];

    public static WorkloadDefinition? Find(string name) => All.FirstOrDefault(w => string.Equals(w.Name, name, StringComparison.OrdinalIgnoreCase));
}
