using System.Collections.Concurrent;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.Logging.Testing;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests.Support;

/// <summary>
/// A pool grain's parts wired as <see cref="PoolGrain"/> wires them, without a silo: over a
/// recording in-memory store with one pool (its own name, so that metrics of parallel tests stay
/// apart), on a fake clock, with the grain's turns a queue that the test runs (<see cref="RunTurns"/>).
/// No gather windows and no store slots: a flush sends what is queued.
/// </summary>
internal sealed class PoolGrainParts
{
    private static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);
    private long _nextArrival;

    private PoolGrainParts(string poolId, GrainOptions options, bool fakeTimer)
    {
        PoolId = poolId;
        Options = options;
        Time = new FakeTimeProvider(Start);
        Store = new RecordingStore(new InMemoryWorkerStore(Time));
        Settings = new KnownPoolSettings(poolId, Store.Inner, _ => SettingsReadFailures++, Abort.Token);
        Replies = new CallerReplies(poolId, Time, () => Settings.Current?.Strategy);
        // The queues run their batches through the runners made below, as in the grain.
        Allocations = new(options.MaxBatchSize, new AdaptiveBatchLimit(options.MaxBatchesInFlight, Time, adaptive: false), Post, batch => AllocationBatches!.RunAsync(batch), p => AllocationBatches!.Admit(p));
        Releases = new(options.MaxBatchSize, new AdaptiveBatchLimit(options.MaxBatchesInFlight, Time, adaptive: false), Post, batch => ReleaseBatches!.RunAsync(batch), r => !r.Completion.Task.IsCompleted);
        Waiters = new CapacityWaiters(Allocations, Replies, Stage, Time, options.MaxBatchSize) { DeadlineTimer = fakeTimer ? DeadlineTimer : null };
        Fence = new PoolActivationFence(poolId, Store);
        ReleaseBatches = new ReleaseBatchRunner(
            poolId, Store, Time, Replies, Abandoned, Releases, Fence, Stage, TaskScheduler.Default, Logger, () => PoolMissingCalls++, () => LeaveIfAskedCalls++, Waiters.OnCapacityChanged, Abort.Token);
        AllocationBatches = new AllocationBatchRunner(
            poolId, Store, options, Time, Settings, Replies, Abandoned, Allocations, Waiters, ReleaseBatches, Fence, Stage, Post, () => PoolMissingCalls++, () => SupersededCalls++, () => LeaveIfAskedCalls++, Abort.Token);
        HandOver = new ActivationHandOver(Stage, Waiters, Allocations, Releases, ReleaseBatches, Replies, () => FeedsStopped++, Abort);
    }

    public string PoolId { get; }

    public GrainOptions Options { get; }

    public FakeTimeProvider Time { get; }

    public RecordingStore Store { get; }

    /// <summary>The grain's turns not run yet.</summary>
    public ConcurrentQueue<Action> Turns { get; } = new();

    public CancellationTokenSource Abort { get; } = new();

    public FakeLogger<PoolGrain> Logger { get; } = new();

    public ActivationStage Stage { get; } = new();

    public AbandonedKeys Abandoned { get; } = new();

    /// <summary>The parts' claim on their pool, as the grain's.</summary>
    public PoolActivationFence Fence { get; }

    public KnownPoolSettings Settings { get; }

    public CallerReplies Replies { get; }

    public GroupCommitQueue<PendingAllocation> Allocations { get; }

    public GroupCommitQueue<PendingRelease> Releases { get; }

    public CapacityWaiters Waiters { get; }

    public RecordingTimer DeadlineTimer { get; } = new();

    public ReleaseBatchRunner ReleaseBatches { get; }

    public AllocationBatchRunner AllocationBatches { get; }

    public ActivationHandOver HandOver { get; }

    public int PoolMissingCalls { get; private set; }

    /// <summary>How often the store refused a batch because a later activation claimed the pool.</summary>
    public int SupersededCalls { get; private set; }

    public int LeaveIfAskedCalls { get; private set; }

    public int FeedsStopped { get; private set; }

    public int SettingsReadFailures { get; private set; }

    /// <param name="createPool">False: the store knows no such pool.</param>
    /// <param name="fakeTimer">False: the grain has dropped its deadline timer (a missing pool).</param>
    public static async Task<PoolGrainParts> CreateAsync(
        int workers = 1, int capacity = 1, PoolSettings? settings = null, GrainOptions? options = null, bool createPool = true, bool fakeTimer = true)
    {
        var parts = new PoolGrainParts($"parts-{Guid.NewGuid():N}", options ?? new GrainOptions(), fakeTimer);
        if (createPool)
        {
            await parts.Store.UpsertPoolAsync(parts.PoolId, settings ?? new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) });
            if (workers > 0)
            {
                await parts.Store.Inner.RegisterWorkersAsync(parts.PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i}", $"10.0.0.{i}:7000", capacity))]);
            }

            await parts.Settings.EnsureAsync(); // as the grain reads them at activation
        }

        return parts;
    }

    /// <summary>A caller as the grain makes one in <see cref="PoolGrain.AllocateAsync"/> (no span, no cancellation).</summary>
    public PendingAllocation Caller(string key, TimeSpan? maxWait = null)
    {
        var wait = AllocationRules.BoundedWait(maxWait ?? TimeSpan.Zero);
        var now = Time.GetUtcNow();
        return new PendingAllocation(new AllocationRequest(key), wait, _nextArrival++, now, Time.GetTimestamp(), AllocationRules.CallDeadline(now, wait, Options.CallTimeout));
    }

    /// <summary>An allocation made in the store, as a caller's earlier batch made it.</summary>
    public async Task<Allocation> AllocatedAsync(string key) =>
        (await Store.Inner.AllocateAsync(PoolId, [new AllocationRequest(key) { Lease = TimeSpan.FromMinutes(5) }]))[0].Allocation
            ?? throw new InvalidOperationException($"The pool had no capacity for {key}.");

    /// <summary>A batch as the allocation queue hands it over: each admitted first, as the queue does.</summary>
    public PendingAllocation[] Admitted(params PendingAllocation[] callers)
    {
        foreach (var caller in callers)
        {
            AllocationBatches.Admit(caller).Should().BeTrue($"{caller.Request.SessionKey} is admitted");
        }

        return callers;
    }

    /// <summary>Runs the grain's turns, those they post included, until none is left.</summary>
    public void RunTurns()
    {
        while (Turns.TryDequeue(out var turn))
        {
            turn();
        }
    }

    public async Task<bool> IsActiveAsync(Allocation allocation) => (await Store.Inner.GetAllocationAsync(PoolId, allocation.AllocationId))!.IsActive;

    private void Post(Action action) => Turns.Enqueue(action);

    /// <summary>The grain's deadline timer: records when it was set to fire.</summary>
    internal sealed class RecordingTimer : IGrainTimer
    {
        public List<TimeSpan> DueTimes { get; } = [];

        public void Change(TimeSpan dueTime, TimeSpan period) => DueTimes.Add(dueTime);

        public void Dispose()
        {
        }
    }
}
