using Allocator.Grains.Serialization;
using Allocator.Telemetry;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans.Concurrency;
using Orleans.Runtime.Placement;

namespace Allocator.Grains;

/// <summary>
/// The grain of one pool: group commit of allocations and releases, and the callers waiting for
/// capacity. Reentrant, because it awaits the store: it keeps accepting calls while batches are
/// in flight (a non-reentrant grain would serialize every caller behind one round trip).
/// Orleans still runs one turn at a time, so its state needs no locks.
/// </summary>
/// <remarks>
/// The grain is the Orleans part (activation, deactivation and moving, timers, the change-feed
/// subscription, turns) and wires plain classes together, each tested on its own:
/// <see cref="GroupCommitQueue{TItem}"/> (who goes to the store when), <see cref="AllocationBatchRunner"/>
/// (an allocation batch and the callers it settles), <see cref="ReleaseBatchRunner"/> (a release
/// batch, and the releases of what callers that gave up left behind), <see cref="CapacityWaiters"/>
/// (who waits for capacity until when, who is woken), <see cref="ActivationHandOver"/> (what a
/// stopping or moving activation does with what it holds), <see cref="AllocationRules"/>,
/// <see cref="CallerReplies"/> (each caller answered once, and recorded), <see cref="AbandonedKeys"/>
/// (what a caller that gave up leaves behind, and who claims it) and <see cref="KnownPoolSettings"/>.
/// All of them run on the grain's turns: what comes from other threads is posted here first.
/// </remarks>
[Reentrant]
[GrainType("allocator-pool")]
internal sealed partial class PoolGrain(
    IWorkerStore store,
    IPoolChangeFeed changes,
    IPoolSettingsCache settingsCache,
    IOptions<GrainOptions> options,
    TimeProvider time,
    LocalPoolGrains local,
    ShortDelays delays,
    StoreBatchSlots storeSlots,
    ILogger<PoolGrain> logger) : Grain, IPoolGrain, IPoolClaimsGrain, IGrainMigrationParticipant
{
    private readonly GrainOptions _options = options.Value;
    private readonly CancellationTokenSource _abort = new();
    private readonly ActivationStage _stage = new();

    // Made with the grain, not at activation: Orleans rehydrates a moved grain before activating it.
    private readonly AbandonedKeys _abandoned = new();
    private string _poolId = "";
    private KeyValuePair<string, object?> _poolTag;
    private TaskScheduler _turns = TaskScheduler.Default;
    private KnownPoolSettings _settings = null!;
    private CallerReplies _replies = null!;
    private GroupCommitQueue<PendingAllocation> _allocations = null!;
    private GroupCommitQueue<PendingRelease> _releases = null!;
    private CapacityWaiters _waiters = null!;
    private ReleaseBatchRunner _releaseBatches = null!;
    private AllocationBatchRunner _allocationBatches = null!;
    private ActivationHandOver _handOver = null!;
    private IDisposable? _subscription;
    private IGrainTimer? _recheckTimer;
    private long _nextArrival;
    private DemandWindow _demand = null!;
    private bool _leaveWhenIdle;

    internal string PoolId => _poolId;

    /// <summary>Completes when this activation has deactivated (after a hand-over: moved).</summary>
    internal Task Deactivated => GrainContext.Deactivated;

    public override async Task OnActivateAsync(CancellationToken cancellationToken)
    {
        _poolId = this.GetPrimaryKeyString();
        _poolTag = new(AllocatorTelemetry.Tags.Pool, _poolId);

        // The activation's own scheduler: work queued on it runs as a turn of this grain.
        _turns = TaskScheduler.Current;
        _settings = new KnownPoolSettings(_poolId, settingsCache, ex => LogSettingsReadFailed(logger, ex, _poolId), _abort.Token);
        _replies = new CallerReplies(_poolId, time, () => _settings.Current?.Strategy);
        _demand = new DemandWindow(time, _options.DemandWindow);
        _replies.Demand = _demand;

        // The queues run their batches through the runners made just below (each needs the other).
        _allocations = new(
            _options.MaxBatchSize,
            new AdaptiveBatchLimit(_options.MaxBatchesInFlight, time, _options.AdaptiveBatchesInFlight),
            Post,
            batch => _allocationBatches.RunAsync(batch),
            pending => _allocationBatches.Admit(pending),
            scheduleAfter: PostAfter,
            slots: storeSlots);
        _releases = new(
            _options.MaxBatchSize,
            new AdaptiveBatchLimit(_options.MaxBatchesInFlight, time, _options.AdaptiveBatchesInFlight),
            Post,
            batch => _releaseBatches.RunAsync(batch),
            release => !release.Completion.Task.IsCompleted,
            slots: storeSlots);
        _waiters = new CapacityWaiters(_allocations, _replies, _stage, time, _options.MaxBatchSize) { ClaimThen = ClaimThen };
        var fence = new PoolActivationFence(_poolId, store);
        _releaseBatches = new ReleaseBatchRunner(
            _poolId, store, time, _replies, _abandoned, _releases, fence, _stage, _turns, logger, ForgetMissingPool, LeaveIfAsked, _waiters.OnCapacityChanged, _abort.Token);
        _allocationBatches = new AllocationBatchRunner(
            _poolId, store, _options, time, _settings, _replies, _abandoned, _allocations, _waiters, _releaseBatches, fence, _stage, Post, ForgetMissingPool, Superseded, LeaveIfAsked, _abort.Token);
        _handOver = new ActivationHandOver(_stage, _waiters, _allocations, _releases, _releaseBatches, _replies, StopFeeds, _abort);

        // Changes made through paths that bypass this grain (the reaper, undrain, another
        // cluster, manual SQL) arrive from the store on its own thread: hop into a turn.
        _subscription = changes.Subscribe(change =>
        {
            if (string.Equals(change.PoolId, _poolId, StringComparison.Ordinal))
            {
                Post(() => OnPoolChanged(change.Kind));
            }
        });
        _recheckTimer = this.RegisterGrainTimer(_waiters.RecheckAsync, new GrainTimerCreationOptions(_options.WaiterRecheckInterval, _options.WaiterRecheckInterval)
        {
            Interleave = true,
            KeepAlive = false,
        });
        _waiters.DeadlineTimer = this.RegisterGrainTimer(_waiters.ExpireAsync, new GrainTimerCreationOptions(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan)
        {
            Interleave = true,
            KeepAlive = false,
        });

        local.Add(this);
        if (local.SiloStopping)
        {
            HandOver(local.SuccessorFor(_poolId));
        }

        // The settings (strategy for telemetry, maximum wait), once per activation. A failure
        // here only leaves them unknown: callers are served, they just cannot wait yet.
        await _settings.EnsureAsync();
        if (_settings.PoolMissing)
        {
            // No such pool (issue 22, #2): keep nothing for a name anyone may send. The calls in
            // hand go on to the store (which answers "not found", or serves them if the pool was
            // created meanwhile), and then this activation leaves: the next call activates one
            // that reads the pool again.
            DropLivePoolState();
            _leaveWhenIdle = true;
        }
    }

    /// <summary>The store said the pool does not exist (deleted, or never created): keep nothing, and leave once the calls in hand are answered.</summary>
    private void ForgetMissingPool()
    {
        DropLivePoolState();
        this.DeactivateOnIdle();
    }

    /// <summary>
    /// The store refused a batch: a later activation of the pool has claimed it (issue 47; this
    /// activation's instance hung and the pool was activated elsewhere). Every caller held here
    /// hears "moved, nothing was done" and sends its call again, to the pool's current activation;
    /// this one leaves.
    /// </summary>
    private void Superseded()
    {
        LogSuperseded(logger, _poolId);
        Post(() => _handOver.StopAccepting(handingOver: true));
        this.DeactivateOnIdle();
    }

    /// <summary>A batch has settled: a grain of a pool found missing at activation leaves once idle.</summary>
    private void LeaveIfAsked()
    {
        if (_leaveWhenIdle)
        {
            this.DeactivateOnIdle();
        }
    }

    /// <summary>What only a pool that exists needs: the change-feed subscription and the timers.</summary>
    private void DropLivePoolState()
    {
        _subscription?.Dispose();
        _subscription = null;
        _recheckTimer?.Dispose();
        _recheckTimer = null;
        _waiters.DeadlineTimer?.Dispose();
        _waiters.DeadlineTimer = null;
    }

    /// <summary>Stopping: no more news of the pool (the timers are disposed, not dropped, as they always were).</summary>
    private void StopFeeds()
    {
        _subscription?.Dispose();
        _recheckTimer?.Dispose();
        _waiters.DeadlineTimer?.Dispose();
    }

    public override async Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken)
    {
        local.Remove(this);
        _handOver.StopAccepting(handingOver: reason.ReasonCode != DeactivationReasonCode.ShuttingDown);

        // Batches in flight may commit: let them finish and answer, unless Orleans stops waiting
        // (then callers hear "outcome unknown" before the store calls are canceled).
        await _handOver.FinishInFlightAsync(cancellationToken);
    }

    /// <summary>
    /// Moving (live migration): what the next activation must know to keep this one's promises
    /// goes with it (<see cref="PoolGrainHandOver"/>); everything else has settled by now.
    /// </summary>
    public void OnDehydrate(IDehydrationContext dehydrationContext)
    {
        if (ActivationHandOver.ToCarry(_abandoned, time.GetUtcNow()) is { } handOver)
        {
            dehydrationContext.TryAddValue(MigrationKeys.PoolGrainHandOver, handOver);
        }
    }

    /// <summary>Arrived from a move: takes over what the previous activation handed on (nothing, from a release that hands nothing).</summary>
    public void OnRehydrate(IRehydrationContext rehydrationContext)
    {
        if (rehydrationContext.TryGetValue(MigrationKeys.PoolGrainHandOver, out PoolGrainHandOver? handOver) && handOver is not null)
        {
            ActivationHandOver.TakeOver(_abandoned, handOver);
        }
    }

    /// <summary>
    /// The silo is stopping (any thread): answer queued and parked callers now and, when another
    /// silo can take the grain, move there with Orleans' live migration. The migration starts
    /// once no call is running here (the batches in the store have answered); calls arriving
    /// meanwhile wait in Orleans' queue and are forwarded to the new activation.
    /// </summary>
    /// <param name="successor">The silo to move to (a placement hint); null: none, just stop.</param>
    internal void HandOver(SiloAddress? successor) => Post(() =>
    {
        _handOver.StopAccepting(handingOver: successor is not null);
        if (successor is not null)
        {
            RequestContext.Set(IPlacementDirector.PlacementHintKey, successor);
            try
            {
                this.MigrateOnIdle();
            }
            finally
            {
                RequestContext.Remove(IPlacementDirector.PlacementHintKey);
            }
        }
    });

    /// <summary>
    /// Orleans began to deactivate this activation while its silo runs on (any thread): the
    /// callers it holds go where the grain is activated next. The silo's own stop is
    /// <see cref="HandOver"/>'s.
    /// </summary>
    internal void OnDeactivating(DeactivationReason reason)
    {
        if (reason.ReasonCode != DeactivationReasonCode.ShuttingDown)
        {
            Post(() => _handOver.StopAccepting(handingOver: true));
        }
    }

    public Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default)
    {
        var pending = Accept(request, maxWait, claim: null, cancellationToken);
        _demand.Arrived(request.Units);
        Go(pending);
        return pending.Completion.Task;
    }

    public Task<AllocationOutcome> AllocateClaimedAsync(AllocationRequest request, TimeSpan maxWait, IPreferredAllocationGrain claimant, Guid attempt, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(claimant);
        var pending = Accept(request, maxWait, new AllocationClaim(claimant, attempt, _poolId), cancellationToken);

        // Its arrival was counted where it was first tried (IPreferredAllocationGrain tries each
        // pool once without waiting): this is the same request, now waiting here too.
        ClaimThen(pending, () => Go(pending), () => _replies.Answer(pending, AllocationOutcome.NoCapacity(), batchSize: 0));
        return pending.Completion.Task;
    }

    /// <summary>A caller's request, checked and held: its deadlines, span and cancellation.</summary>
    private PendingAllocation Accept(AllocationRequest request, TimeSpan maxWait, AllocationClaim? claim, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(request);

        // Checked per caller: one bad request must not fail the batch it would have joined.
        if (AllocatorValidation.CheckRequest(request) is { } error)
        {
            throw new ArgumentException(error, nameof(request));
        }

        ArgumentOutOfRangeException.ThrowIfLessThan(maxWait, TimeSpan.Zero);
        if (_stage.Stopping)
        {
            throw _stage.StopAnswer();
        }

        cancellationToken.ThrowIfCancellationRequested();
        var wait = AllocationRules.BoundedWait(maxWait);
        var now = time.GetUtcNow();
        var pending = new PendingAllocation(request, wait, _nextArrival++, now, time.GetTimestamp(), AllocationRules.CallDeadline(now, wait, _options.CallTimeout))
        {
            Span = _replies.StartSpan(GrainTelemetry.AllocateSpan, request.Units),
            Claim = claim,
        };

        if (cancellationToken.CanBeCanceled)
        {
            pending.CancellationRegistration = cancellationToken.UnsafeRegister((state, token) => OnCanceled((PendingAllocation)state!, token), pending);
        }

        return pending;
    }

    /// <summary>
    /// To the allocation queue; a retry of a key whose earlier caller gave up in the store claims
    /// what that caller's batch allocates instead, and waits for a release of it already in the store.
    /// </summary>
    private void Go(PendingAllocation pending)
    {
        if (!_abandoned.Claim(AllocationRules.ClaimKey(pending.Request), () => _allocationBatches.Resume(pending)))
        {
            _allocations.Enqueue(pending);
        }
    }

    /// <summary>
    /// Asks <paramref name="pending"/>'s claim; in a turn of this activation, runs
    /// <paramref name="granted"/> with the claim held, or <paramref name="refused"/> (the claim
    /// went elsewhere for good, the caller left, or this activation is stopping).
    /// </summary>
    private void ClaimThen(PendingAllocation pending, Action granted, Action refused)
    {
        var claim = pending.Claim!;
        Task<long> asking;
        try
        {
            asking = claim.AskAsync();
        }
        catch (Exception ex)
        {
            asking = Task.FromException<long>(ex);
        }

        _ = asking.ContinueWith(
            answer => Post(() =>
            {
                var lease = answer.IsCompletedSuccessfully ? answer.Result : 0;
                if (lease > 0 && !pending.IsDone && !_stage.Stopping)
                {
                    pending.ClaimLease = lease;
                    granted();
                    return;
                }

                if (lease > 0)
                {
                    claim.GiveBack(lease);
                }

                refused();
            }),
            CancellationToken.None,
            TaskContinuationOptions.ExecuteSynchronously,
            TaskScheduler.Default);
    }

    public Task<bool> AbandonAsync(AllocationRequest request, Allocation allocation)
    {
        ArgumentNullException.ThrowIfNull(request);
        ArgumentNullException.ThrowIfNull(allocation);
        var key = AllocationRules.ClaimKey(request);

        // A request for the key still queued or parked will be answered this allocation: it is theirs.
        if (_allocations.QueuedItems.Concat(_waiters.Parked).Any(p => AllocationRules.ClaimKey(p.Request) == key)
            || !_abandoned.AbandonedAfterAnswer(key, time.GetUtcNow()))
        {
            LogAbandonedKeptForRetry(logger, allocation.AllocationId, _poolId);
            return Task.FromResult(false);
        }

        _releaseBatches.ReleaseAbandoned(key, allocation);
        return Task.FromResult(true);
    }

    public Task<LeaseResult> ReleaseAsync(Guid allocationId, long epoch, string? owner = null, CancellationToken cancellationToken = default)
    {
        if (_stage.Stopping)
        {
            throw _stage.StopAnswer();
        }

        cancellationToken.ThrowIfCancellationRequested();
        var pending = new PendingRelease(new LeaseRelease(allocationId, epoch) { Owner = owner }, _replies.StartSpan(GrainTelemetry.ReleaseSpan, units: null));
        if (cancellationToken.CanBeCanceled)
        {
            // Queued: it leaves the queue (nothing was done). In a batch: the caller stops
            // waiting, the release may still commit.
            pending.CancellationRegistration = cancellationToken.UnsafeRegister(
                (state, token) =>
                {
                    var canceled = (PendingRelease)state!;
                    _replies.GiveUp(canceled, token);
                    Post(() => _releases.Remove(canceled));
                },
                pending);
        }

        _releases.Enqueue(pending);
        return pending.Completion.Task;
    }

    public Task OnCapacityChangedAsync()
    {
        OnPoolChanged(PoolChangeKind.CapacityAvailable);
        return Task.CompletedTask;
    }

    public Task OnSettingsChangedAsync()
    {
        OnPoolChanged(PoolChangeKind.SettingsChanged);
        return Task.CompletedTask;
    }

    public Task<PoolGrainStatus> GetStatusAsync() => Task.FromResult(new PoolGrainStatus(
        GrainContext.Address.SiloAddress?.ToParsableString() ?? "",
        _waiters.Count,
        _allocations.Pending + _abandoned.HeldBack,
        _allocations.InFlight,
        _releases.Pending,
        _releases.InFlight + _releaseBatches.DirectInFlight)
    {
        Demand = _demand.Read(_waiters.Count),
    });

    /// <summary>Queues an action as a turn of this activation, behind the work already queued for it.</summary>
    private void Post(Action action)
    {
        _ = Task.Factory.StartNew(
            () =>
            {
                try
                {
                    action();
                }
                catch (Exception ex)
                {
                    // Grain code answers its own errors; reaching here is a bug. Never lose it silently.
                    GrainTelemetry.TurnFailures.Add(1, _poolTag);
                    LogTurnFailed(logger, ex, _poolId);
                }
            },
            CancellationToken.None,
            TaskCreationOptions.None,
            _turns);
    }

    /// <summary>
    /// Queues an action as a turn of this activation once <paramref name="delay"/> (a gather
    /// window, under a millisecond) has passed: on the silo's <see cref="ShortDelays"/>, because
    /// the runtime's timers are milliseconds late.
    /// </summary>
    private void PostAfter(TimeSpan delay, Action action)
    {
        try
        {
            delays.Schedule(delay, () => Post(action));
        }
        catch (ObjectDisposedException)
        {
            Post(action); // the silo is stopping: no window, just the turn
        }
    }

    private void OnPoolChanged(PoolChangeKind kind)
    {
        if (kind == PoolChangeKind.SettingsChanged)
        {
            _settings.Changed();
            return;
        }

        _waiters.OnCapacityChanged();
    }

    /// <summary>Any thread: answer the caller at once (<see cref="CallerReplies.GiveUp"/>), tidy up in a turn.</summary>
    private void OnCanceled(PendingAllocation pending, CancellationToken token)
    {
        _replies.GiveUp(pending, token);
        Post(() =>
        {
            _waiters.Forget(pending);
            _allocationBatches.ReleaseIfUnclaimed(AllocationRules.ClaimKey(pending.Request));
        });
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "A turn of pool grain {Pool} threw; this is a bug.")]
    private static partial void LogTurnFailed(ILogger logger, Exception exception, string pool);

    [LoggerMessage(Level = LogLevel.Information, Message = "Keeping allocation {AllocationId} in pool {Pool}: its first caller left before hearing of it, but a request for its key was answered it or is on its way.")]
    private static partial void LogAbandonedKeptForRetry(ILogger logger, Guid allocationId, string pool);

    [LoggerMessage(Level = LogLevel.Warning, Message = "This activation of pool grain {Pool} was superseded: a later activation has claimed the pool in the store (this instance was unresponsive for a while). Its callers are sent on to that activation, and it leaves.")]
    private static partial void LogSuperseded(ILogger logger, string pool);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not read the settings of pool {Pool}; the settings last read stay in force (with none, callers cannot wait for capacity) until a read succeeds.")]
    private static partial void LogSettingsReadFailed(ILogger logger, Exception exception, string pool);
}
