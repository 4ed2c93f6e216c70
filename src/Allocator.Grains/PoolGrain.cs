using System.Diagnostics;
using Allocator.Grains.Runtime;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>
/// The grain of one pool in this instance: group commit of allocation requests and the queue of
/// callers waiting for capacity. All fields are touched only in this activation's turns (see
/// <see cref="ActivationScheduler"/>), except the few marked otherwise.
/// </summary>
/// <remarks>
/// Requests gather in <see cref="_pending"/>; a flush turn hands up to
/// <see cref="GrainOptions.MaxBatchSize"/> of them to the store as one call while fewer batches
/// are in flight than the <see cref="AdaptiveBatchLimit"/> allows (at most
/// <see cref="GrainOptions.MaxBatchesInFlight"/>). The grain never awaits
/// a batch in the turn that accepts calls, so it keeps accepting while batches run. A request
/// answered <see cref="AllocationStatus.NoCapacity"/> that may still wait is parked in
/// <see cref="_waiters"/> (arrival order) until a capacity notification, the re-check timer or
/// its deadline. Releases are group-committed the same way in batches of their own; a release
/// batch that freed capacity wakes the waiters at once (not only when the store's notification
/// comes back).
/// </remarks>
internal sealed class PoolGrain : IPoolGrain, IGrainLifecycle
{
    private readonly IGrainContext _context;
    private readonly IWorkerStore _store;
    private readonly GrainOptions _options;
    private readonly string _poolId;
    private readonly TimeProvider _time;
    private readonly LinkedList<PendingAllocation> _pending = new();
    private readonly SortedSet<PendingAllocation> _waiters = new(PendingAllocation.ArrivalOrder);
    private readonly HashSet<Task> _batchTasks = [];
    private readonly HashSet<PendingAllocation[]> _batchesInFlight = [];
    private readonly LinkedList<PendingRelease> _pendingReleases = new();
    private readonly HashSet<PendingRelease[]> _releaseBatchesInFlight = [];
    private readonly CancellationTokenSource _abort = new();
    private readonly KeyValuePair<string, object?> _poolTag;
    private readonly AdaptiveBatchLimit _allocationLimit;
    private readonly AdaptiveBatchLimit _releaseLimit;
    private PoolSettings? _settings;
    private Task<PoolSettings?>? _settingsFetch;
    private int _settingsVersion;
    private IDisposable? _subscription;
    private IDisposable? _recheckTimer;
    private long _nextArrival;
    private long _capacityChanges;
    private bool _flushPosted;
    private bool _releaseFlushPosted;
    private int _wokenOutstanding;
    private bool _wakeFailed; // the last batch that touched waiters found no capacity
    private bool _wakeRequested;
    private bool _stopping;
    private int _waiterCount; // read outside turns through Waiters

    public PoolGrain(IGrainContext context, IWorkerStore store, GrainOptions options)
    {
        _context = context;
        _store = store;
        _options = options;
        _poolId = context.Key;
        _time = context.TimeProvider;
        _poolTag = new(AllocatorTelemetry.Tags.Pool, _poolId);
        _allocationLimit = new AdaptiveBatchLimit(options.MaxBatchesInFlight, _time, options.AdaptiveBatchesInFlight);
        _releaseLimit = new AdaptiveBatchLimit(options.MaxBatchesInFlight, _time, options.AdaptiveBatchesInFlight);
    }

    public int Waiters => Volatile.Read(ref _waiterCount);

    /// <summary>The pool's settings as last read (a racy read from outside turns; for tests).</summary>
    internal PoolSettings? Settings => Volatile.Read(ref _settings);

    /// <summary>Requests queued for a batch (a racy read from outside turns; for tests).</summary>
    internal int QueuedCount => _pending.Count;

    /// <summary>Releases queued for a batch (a racy read from outside turns; for tests).</summary>
    internal int QueuedReleaseCount => _pendingReleases.Count;

    public async Task OnActivateAsync(CancellationToken cancellationToken)
    {
        // The store calls the handler on its own thread: hop into a turn before touching state.
        _subscription = _store.SubscribeToPoolChanges(change =>
        {
            if (string.Equals(change.PoolId, _poolId, StringComparison.Ordinal))
            {
                _context.Post(() => OnPoolChanged(change.Kind));
            }
        });
        _recheckTimer = _context.RegisterTimer(RecheckWaiters, _options.WaiterRecheckInterval, _options.WaiterRecheckInterval);

        // The settings (strategy for telemetry, maximum wait) once per activation: one read for
        // the first call of a pool in this instance. A failure here only leaves them unknown.
        await EnsureSettingsAsync();
    }

    public async Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken)
    {
        _stopping = true;
        _subscription?.Dispose();
        _recheckTimer?.Dispose();

        // Queued and parked callers: nothing was done for them, so they can safely retry.
        foreach (var waiter in _waiters.ToList())
        {
            Unpark(waiter);
            Fail(waiter, GrainErrors.Stopping());
        }

        foreach (var pending in _pending)
        {
            Fail(pending, GrainErrors.Stopping());
        }

        _pending.Clear();
        foreach (var release in _pendingReleases)
        {
            release.Fail(GrainErrors.Stopping());
        }

        _pendingReleases.Clear();

        // Batches in flight may commit: let them finish and answer, unless told to stop waiting.
        try
        {
            await Task.WhenAll(_batchTasks).WaitAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            await _abort.CancelAsync();
            foreach (var batch in _batchesInFlight)
            {
                foreach (var pending in batch)
                {
                    Fail(pending, GrainErrors.Stopping());
                }
            }

            foreach (var release in _releaseBatchesInFlight.SelectMany(b => b))
            {
                release.Fail(GrainErrors.Stopping());
            }
        }
    }

    public Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(request);

        // Checked per caller: one bad request must not fail the batch it would have joined.
        if (AllocatorValidation.CheckRequest(request) is { } error)
        {
            throw new ArgumentException(error, nameof(request));
        }

        ArgumentOutOfRangeException.ThrowIfLessThan(maxWait, TimeSpan.Zero);
        if (_stopping)
        {
            throw GrainErrors.Stopping();
        }

        cancellationToken.ThrowIfCancellationRequested();
        var pending = new PendingAllocation(
            request,
            maxWait > AllocatorLimits.MaxWait ? AllocatorLimits.MaxWait : maxWait,
            _nextArrival++,
            _time.GetUtcNow(),
            _time.GetTimestamp())
        {
            Span = StartCallerSpan(request),
        };

        if (cancellationToken.CanBeCanceled)
        {
            pending.CancellationRegistration = cancellationToken.UnsafeRegister((state, token) => OnCanceled((PendingAllocation)state!, token), pending);
        }

        pending.Node = _pending.AddLast(pending);
        ScheduleFlush();
        return pending.Completion.Task;
    }

    public Task<LeaseResult> ReleaseAsync(Guid allocationId, long epoch, CancellationToken cancellationToken = default)
    {
        if (_stopping)
        {
            throw GrainErrors.Stopping();
        }

        cancellationToken.ThrowIfCancellationRequested();

        // A child of the caller's span; Activity.Current is left as it was.
        var previous = Activity.Current;
        var span = AllocatorTelemetry.ActivitySource.StartActivity(GrainTelemetry.ReleaseSpan, ActivityKind.Internal);
        Activity.Current = previous;
        span?.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);

        var pending = new PendingRelease(new LeaseRelease(allocationId, epoch), span);
        if (cancellationToken.CanBeCanceled)
        {
            // Queued: it leaves the queue (nothing was done). In a batch: the caller stops
            // waiting, the release may still commit.
            pending.CancellationRegistration = cancellationToken.UnsafeRegister(
                (state, token) =>
                {
                    var canceled = (PendingRelease)state!;
                    canceled.Cancel(token);
                    _context.Post(() =>
                    {
                        if (canceled.Node is { } node)
                        {
                            _pendingReleases.Remove(node);
                            canceled.Node = null;
                        }
                    });
                },
                pending);
        }

        pending.Node = _pendingReleases.AddLast(pending);
        ScheduleReleaseFlush();
        return pending.Completion.Task;
    }

    private void ScheduleReleaseFlush()
    {
        // As for allocations: no delay of its own, only the calls already queued for this turn join.
        if (!_releaseFlushPosted)
        {
            _releaseFlushPosted = true;
            _context.Post(FlushReleases);
        }
    }

    private void FlushReleases()
    {
        _releaseFlushPosted = false;
        while (!_stopping && _releaseLimit.MayStart(_releaseBatchesInFlight.Count, _pendingReleases.Count >= _options.MaxBatchSize))
        {
            List<PendingRelease> taken = [];
            while (taken.Count < _options.MaxBatchSize && _pendingReleases.First is { } node)
            {
                _pendingReleases.RemoveFirst();
                node.Value.Node = null;
                if (!node.Value.Completion.Task.IsCompleted)
                {
                    taken.Add(node.Value);
                }
            }

            if (taken.Count == 0)
            {
                return;
            }

            PendingRelease[] batch = [.. taken];
            _releaseBatchesInFlight.Add(batch);
            var task = RunReleaseBatchAsync(batch);
            _batchTasks.Add(task);
            _ = task.ContinueWith(t => _batchTasks.Remove(t), CancellationToken.None, TaskContinuationOptions.None, TaskScheduler.Current);
        }
    }

    private async Task RunReleaseBatchAsync(PendingRelease[] batch)
    {
        List<ActivityLink> links = [];
        ActivityContext parent = default;
        foreach (var pending in batch)
        {
            if (pending.Span is { } span)
            {
                links.Add(new ActivityLink(span.Context));
                parent = parent == default ? span.Context : parent;
            }
        }

        GrainTelemetry.ReleaseBatchSize.Record(batch.Length, _poolTag);
        using var batchSpan = GrainTelemetry.StartDetached(GrainTelemetry.ReleaseBatchSpan, parent, links);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.Store, _store.Name);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.BatchSize, batch.Length);
        var releases = Array.ConvertAll(batch, p => p.Release);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.BatchesInFlightLimit, _releaseLimit.Current);
        try
        {
            var storeStarted = _time.GetTimestamp();
            var results = await CallStore(batchSpan, () => _store.ReleaseAsync(_poolId, releases, _abort.Token));
            _releaseLimit.Record(_time.GetElapsedTime(storeStarted));
            if (results.Count != batch.Length)
            {
                throw new InvalidOperationException($"The store answered {results.Count} results for a release batch of {batch.Length}.");
            }

            for (var i = 0; i < batch.Length; i++)
            {
                batch[i].Complete(results[i], batch.Length);
            }

            if (results.Any(r => r.Status == LeaseStatus.Ok))
            {
                // Capacity this instance freed: wake its waiters now rather than after the
                // notification's round trip (or the re-check timer, where a store has none).
                OnPoolChanged(PoolChangeKind.CapacityAvailable);
            }
        }
        catch (Exception ex)
        {
            batchSpan?.SetStatus(ActivityStatusCode.Error, ex.Message);
            batchSpan?.AddException(ex);
            foreach (var pending in batch)
            {
                pending.Fail(ex);
            }
        }
        finally
        {
            _releaseBatchesInFlight.Remove(batch);
            FlushReleases();
        }
    }

    private Activity? StartCallerSpan(AllocationRequest request)
    {
        // A child of the caller's span (the host's request span); Activity.Current is left as it was.
        var previous = Activity.Current;
        var span = AllocatorTelemetry.ActivitySource.StartActivity(GrainTelemetry.AllocateSpan, ActivityKind.Internal);
        Activity.Current = previous;
        if (span is not null)
        {
            span.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);
            span.SetTag(AllocatorTelemetry.Tags.Units, request.Units);
            if (_settings is { } settings)
            {
                span.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(settings.Strategy));
            }
        }

        return span;
    }

    private void ScheduleFlush()
    {
        // A flush turn queued behind the calls already waiting for this activation lets them
        // join one batch; it adds no delay of its own.
        if (!_flushPosted)
        {
            _flushPosted = true;
            _context.Post(Flush);
        }
    }

    private void Flush()
    {
        _flushPosted = false;
        while (!_stopping && _allocationLimit.MayStart(_batchesInFlight.Count, _pending.Count >= _options.MaxBatchSize))
        {
            var batch = TakeBatch();
            if (batch.Length == 0)
            {
                return;
            }

            _batchesInFlight.Add(batch);
            var task = RunBatchAsync(batch);
            _batchTasks.Add(task);
            _ = task.ContinueWith(t => _batchTasks.Remove(t), CancellationToken.None, TaskContinuationOptions.None, TaskScheduler.Current);
        }
    }

    private PendingAllocation[] TakeBatch()
    {
        List<PendingAllocation> batch = [];
        while (batch.Count < _options.MaxBatchSize && _pending.First is { } node)
        {
            _pending.RemoveFirst();
            var pending = node.Value;
            pending.Node = null;
            if (pending.IsDone)
            {
                WokenReturned(pending, stillNoCapacity: false);
                continue;
            }

            batch.Add(pending);
        }

        return [.. batch];
    }

    private async Task RunBatchAsync(PendingAllocation[] batch)
    {
        var requests = new AllocationRequest[batch.Length];
        List<ActivityLink> links = [];
        ActivityContext parent = default;
        var started = _time.GetTimestamp();
        for (var i = 0; i < batch.Length; i++)
        {
            requests[i] = batch[i].Request;
            batch[i].BatchStarted = started;
            if (batch[i].Span is { } span)
            {
                links.Add(new ActivityLink(span.Context));
                if (parent == default)
                {
                    parent = span.Context;
                }
            }
        }

        var changesAtStart = _capacityChanges;
        var tags = new TagList { _poolTag };
        GrainTelemetry.BatchSize.Record(batch.Length, tags);

        // The batch span is a child of the first caller it serves and links all of them, so one
        // allocation reads HTTP → grain → batch → SQL and every caller finds its batch.
        using var batchSpan = GrainTelemetry.StartDetached(GrainTelemetry.BatchSpan, parent, links);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.Store, _store.Name);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.BatchSize, batch.Length);
        batchSpan?.SetTag(AllocatorTelemetry.Tags.BatchesInFlightLimit, _allocationLimit.Current);
        if (_settings is { } known)
        {
            batchSpan?.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(known.Strategy));
        }

        IReadOnlyList<AllocationOutcome> outcomes;
        var storeStarted = _time.GetTimestamp();
        try
        {
            try
            {
                outcomes = await CallStore(batchSpan, () => _store.AllocateAsync(_poolId, requests, _abort.Token));
                _allocationLimit.Record(_time.GetElapsedTime(storeStarted));
            }
            finally
            {
                GrainTelemetry.BatchDuration.Record(_time.GetElapsedTime(storeStarted).TotalSeconds, tags);
            }

            if (outcomes.Count != batch.Length)
            {
                throw new InvalidOperationException($"The store answered {outcomes.Count} outcomes for a batch of {batch.Length}.");
            }

            if (batch.Any(p => !p.IsDone && p.MaxWait > TimeSpan.Zero && p.Deadline is null)
                && outcomes.Any(o => o.Status == AllocationStatus.NoCapacity))
            {
                await EnsureSettingsAsync();
            }
        }
        catch (Exception ex)
        {
            batchSpan?.SetStatus(ActivityStatusCode.Error, ex.Message);
            batchSpan?.AddException(ex);
            _batchesInFlight.Remove(batch);
            foreach (var pending in batch)
            {
                WokenReturned(pending, stillNoCapacity: true);
                Fail(pending, ex);
            }

            AfterBatch(parkedAny: false, changesAtStart);
            return;
        }

        _batchesInFlight.Remove(batch);
        var parkedAny = false;
        var now = _time.GetUtcNow();
        for (var i = 0; i < batch.Length; i++)
        {
            var pending = batch[i];
            var outcome = outcomes[i];
            var mayWait = outcome.Status == AllocationStatus.NoCapacity && !pending.IsDone && MayWait(pending, now);
            WokenReturned(pending, stillNoCapacity: outcome.Status == AllocationStatus.NoCapacity);
            if (mayWait && !_stopping)
            {
                Park(pending, outcome, now);
                parkedAny = true;
            }
            else if (mayWait)
            {
                Fail(pending, GrainErrors.Stopping());
            }
            else
            {
                Complete(pending, outcome, batch.Length);
            }
        }

        // Someone just found no capacity: wake again only on news of a change, not at once.
        _wakeFailed |= parkedAny;
        AfterBatch(parkedAny, changesAtStart);
    }

    private void AfterBatch(bool parkedAny, long changesAtStart)
    {
        // Capacity freed while the batch ran may postdate the statement that found none.
        if (parkedAny && _capacityChanges != changesAtStart)
        {
            _wakeRequested = true;
        }

        TryWake();
        Flush();
    }

    /// <summary>Calls the store on the thread pool, with the batch span current so the store's spans nest under it.</summary>
    private static Task<T> CallStore<T>(Activity? span, Func<Task<T>> call)
    {
        var previous = Activity.Current;
        Activity.Current = span;
        try
        {
            // Off the activation: store code never runs in (or blocks) a grain turn.
            return Task.Run(call);
        }
        finally
        {
            Activity.Current = previous;
        }
    }

    private bool MayWait(PendingAllocation pending, DateTimeOffset now)
    {
        if (pending.MaxWait <= TimeSpan.Zero)
        {
            return false;
        }

        if (pending.Deadline is null)
        {
            if (_settings is not { } settings)
            {
                return false; // the pool's bound is unknown (settings could not be read): do not wait
            }

            var wait = pending.MaxWait < settings.MaxWait ? pending.MaxWait : settings.MaxWait;
            pending.Deadline = pending.ArrivedAt + wait;
        }

        return pending.Deadline > now;
    }

    private void Park(PendingAllocation pending, AllocationOutcome outcome, DateTimeOffset now)
    {
        pending.LastOutcome = outcome;
        pending.Parked = true;
        _waiters.Add(pending);
        Volatile.Write(ref _waiterCount, _waiters.Count);
        GrainTelemetry.Waiters.Add(1, _poolTag);
        pending.DeadlineTimer ??= _context.RegisterTimer(
            () =>
            {
                Expire(pending);
                return Task.CompletedTask;
            },
            pending.Deadline!.Value - now,
            Timeout.InfiniteTimeSpan);
    }

    private void Unpark(PendingAllocation pending)
    {
        if (pending.Parked)
        {
            pending.Parked = false;
            _waiters.Remove(pending);
            Volatile.Write(ref _waiterCount, _waiters.Count);
            GrainTelemetry.Waiters.Add(-1, _poolTag);
        }
    }

    private void Expire(PendingAllocation pending)
    {
        // Only a parked waiter expires here; one in a batch is answered by that batch.
        if (pending.Parked)
        {
            Unpark(pending);
            Complete(pending, pending.LastOutcome ?? AllocationOutcome.NoCapacity(), batchSize: 0);
        }
    }

    private void OnPoolChanged(PoolChangeKind kind)
    {
        if (kind == PoolChangeKind.SettingsChanged)
        {
            _settings = null;
            _settingsFetch = null;
            _settingsVersion++;
            _ = EnsureSettingsAsync();
            return;
        }

        _capacityChanges++;
        _wakeRequested = true;
        TryWake();
    }

    private Task RecheckWaiters()
    {
        // The safety net for lost notifications (and stores that have none).
        if (_waiters.Count > 0)
        {
            _wakeRequested = true;
            TryWake();
        }

        return Task.CompletedTask;
    }

    /// <summary>
    /// Sends the longest-waiting callers (one batch of them) back through the batcher, ahead of
    /// new arrivals. When all of them are served and more wait, the next group follows; when
    /// some still find no capacity, waking stops until the next change.
    /// </summary>
    private void TryWake()
    {
        if (_stopping || _wokenOutstanding > 0 || _waiters.Count == 0 || (!_wakeRequested && _wakeFailed))
        {
            return;
        }

        _wakeRequested = false;
        _wakeFailed = false;
        List<PendingAllocation> group = [];
        foreach (var waiter in _waiters)
        {
            if (group.Count == _options.MaxBatchSize)
            {
                break;
            }

            group.Add(waiter);
        }

        for (var i = group.Count - 1; i >= 0; i--)
        {
            var waiter = group[i];
            Unpark(waiter);
            waiter.Woken = true;
            waiter.Node = _pending.AddFirst(waiter);
        }

        _wokenOutstanding = group.Count;
        ScheduleFlush();
    }

    private void WokenReturned(PendingAllocation pending, bool stillNoCapacity)
    {
        if (!pending.Woken)
        {
            return;
        }

        pending.Woken = false;
        _wokenOutstanding--;
        _wakeFailed |= stillNoCapacity;
    }

    private void OnCanceled(PendingAllocation pending, CancellationToken token)
    {
        // Store thread or caller thread: answer the caller at once, tidy up in a turn.
        if (pending.TryFinish())
        {
            pending.Span?.SetTag(AllocatorTelemetry.Tags.Outcome, "canceled");
            Record(pending, "canceled");
            pending.Completion.TrySetCanceled(token);
        }

        _context.Post(() => Forget(pending));
    }

    private void Forget(PendingAllocation pending)
    {
        Unpark(pending);
        pending.DeadlineTimer?.Dispose();
        if (pending.Node is { } node)
        {
            _pending.Remove(node);
            pending.Node = null;
            WokenReturned(pending, stillNoCapacity: false);
            TryWake();
        }
    }

    private void Complete(PendingAllocation pending, AllocationOutcome outcome, int batchSize)
    {
        pending.DeadlineTimer?.Dispose();
        if (!pending.TryFinish())
        {
            return;
        }

        pending.CancellationRegistration.Dispose();
        var outcomeName = outcome.Status.ToOutcomeName();
        if (pending.Span is { } span)
        {
            var decision = outcome.Decision;
            span.SetTag(AllocatorTelemetry.Tags.Outcome, outcomeName);
            span.SetTag(AllocatorTelemetry.Tags.BatchSize, batchSize);
            span.SetTag(AllocatorTelemetry.Tags.QueueWait, pending.BatchStarted == 0 ? 0d : _time.GetElapsedTime(pending.ArrivalTimestamp, pending.BatchStarted).TotalSeconds);
            span.SetTag(AllocatorTelemetry.Tags.Retries, decision.Retries);
            span.SetTag(AllocatorTelemetry.Tags.BlockingFallback, decision.BlockingFallback);
            span.SetTag(AllocatorTelemetry.Tags.RowsSkipped, decision.RowsSkipped);
            if (_settings is { } settings)
            {
                span.SetTag(AllocatorTelemetry.Tags.Strategy, AllocatorTelemetry.StrategyValue(settings.Strategy));
            }

            if (outcome.Allocation is { } allocation)
            {
                span.SetTag(AllocatorTelemetry.Tags.Worker, allocation.WorkerId);
                span.SetTag(AllocatorTelemetry.Tags.Rank, decision.Rank);
                span.SetTag(AllocatorTelemetry.Tags.ExcessScore, decision.ExcessScore);
            }
        }

        if (outcome.Decision.BlockingFallback)
        {
            GrainTelemetry.Fallbacks.Add(1, _poolTag);
        }

        Record(pending, outcomeName);
        pending.Completion.TrySetResult(outcome);
    }

    private void Fail(PendingAllocation pending, Exception exception)
    {
        pending.DeadlineTimer?.Dispose();
        if (!pending.TryFinish())
        {
            return;
        }

        pending.CancellationRegistration.Dispose();
        if (pending.Span is { } span)
        {
            span.SetTag(AllocatorTelemetry.Tags.Outcome, "error");
            span.SetStatus(ActivityStatusCode.Error, exception.Message);
        }

        Record(pending, "error");
        pending.Completion.TrySetException(exception);
    }

    private void Record(PendingAllocation pending, string outcome)
    {
        var tags = new TagList { _poolTag, { AllocatorTelemetry.Tags.Outcome, outcome } };
        GrainTelemetry.Outcomes.Add(1, tags);
        GrainTelemetry.AllocationDuration.Record(_time.GetElapsedTime(pending.ArrivalTimestamp).TotalSeconds, tags);
        pending.Span?.Dispose();
    }

    private async Task<PoolSettings?> EnsureSettingsAsync()
    {
        if (_settings is { } known)
        {
            return known;
        }

        var version = _settingsVersion;
        _settingsFetch ??= FetchSettingsAsync();
        var fetch = _settingsFetch;
        try
        {
            var settings = await fetch;
            if (version == _settingsVersion)
            {
                _settings = settings;
            }

            return settings;
        }
        catch (Exception) when (!_abort.IsCancellationRequested)
        {
            // Unknown settings only mean "do not wait" for now; the next need fetches again.
            if (ReferenceEquals(_settingsFetch, fetch))
            {
                _settingsFetch = null;
            }

            return null;
        }
    }

    private async Task<PoolSettings?> FetchSettingsAsync()
    {
        var pool = await Task.Run(() => _store.GetPoolAsync(_poolId, _abort.Token));
        return pool?.Settings;
    }

    /// <summary>One caller's release while the grain holds it.</summary>
    private sealed class PendingRelease(LeaseRelease release, Activity? span)
    {
        public LeaseRelease Release { get; } = release;

        public Activity? Span { get; } = span;

        public TaskCompletionSource<LeaseResult> Completion { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public CancellationTokenRegistration CancellationRegistration { get; set; }

        public LinkedListNode<PendingRelease>? Node { get; set; }

        public void Complete(LeaseResult result, int batchSize)
        {
            CancellationRegistration.Dispose();
            if (Completion.TrySetResult(result) && Span is { } span)
            {
                span.SetTag(AllocatorTelemetry.Tags.Outcome, AllocatorTelemetry.Outcomes.Of(result.Status));
                span.SetTag(AllocatorTelemetry.Tags.BatchSize, batchSize);
                span.Dispose();
            }
        }

        public void Fail(Exception exception)
        {
            CancellationRegistration.Dispose();
            if (Completion.TrySetException(exception) && Span is { } span)
            {
                span.SetTag(AllocatorTelemetry.Tags.Outcome, "error");
                span.SetStatus(ActivityStatusCode.Error, exception.Message);
                span.Dispose();
            }
        }

        public void Cancel(CancellationToken token)
        {
            if (Completion.TrySetCanceled(token) && Span is { } span)
            {
                span.SetTag(AllocatorTelemetry.Tags.Outcome, "canceled");
                span.Dispose();
            }
        }
    }

    /// <summary>One caller's request while the grain holds it.</summary>
    private sealed class PendingAllocation(AllocationRequest request, TimeSpan maxWait, long arrival, DateTimeOffset arrivedAt, long arrivalTimestamp)
    {
        public static readonly IComparer<PendingAllocation> ArrivalOrder = Comparer<PendingAllocation>.Create((a, b) => a.Arrival.CompareTo(b.Arrival));

        private int _done; // 0 or 1: who answers the caller (grain turn or a cancellation thread)

        public AllocationRequest Request { get; } = request;

        public TimeSpan MaxWait { get; } = maxWait;

        public long Arrival { get; } = arrival;

        public DateTimeOffset ArrivedAt { get; } = arrivedAt;

        public long ArrivalTimestamp { get; } = arrivalTimestamp;

        public TaskCompletionSource<AllocationOutcome> Completion { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public Activity? Span { get; init; }

        public CancellationTokenRegistration CancellationRegistration { get; set; }

        public LinkedListNode<PendingAllocation>? Node { get; set; }

        public DateTimeOffset? Deadline { get; set; }

        public IDisposable? DeadlineTimer { get; set; }

        public AllocationOutcome? LastOutcome { get; set; }

        public long BatchStarted { get; set; }

        public bool Parked { get; set; }

        public bool Woken { get; set; }

        public bool IsDone => Volatile.Read(ref _done) != 0;

        public bool TryFinish() => Interlocked.Exchange(ref _done, 1) == 0;
    }
}
