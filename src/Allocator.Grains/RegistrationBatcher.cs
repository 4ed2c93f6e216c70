using System.Diagnostics;
using Allocator.Telemetry;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans.Concurrency;

namespace Allocator.Grains;

/// <summary>
/// Registration storms: registrations of one pool arriving together at this silo are upserted
/// in batches of up to <see cref="GrainOptions.MaxRegistrationBatchSize"/> (the store locks rows
/// in (pool, worker id) order and retries deadlocks). One local activation per silo: a
/// registration never crosses the network to be batched. A worker id is in at most one batch in
/// flight, so registrations of one worker apply in arrival order. A batch that added or changed
/// workers tells the pool grain, which wakes its waiters.
/// </summary>
[StatelessWorker(1)]
[Reentrant]
[GrainType("allocator-registration-batcher")]
internal sealed partial class RegistrationBatcher(
    IWorkerStore store,
    IPoolChangeFeed changes,
    IPoolSettingsCache settingsCache,
    IOptions<GrainOptions> options,
    StoreBatchSlots storeSlots,
    TimeProvider time,
    ILogger<RegistrationBatcher> logger) : Grain, IRegistrationBatcherGrain
{
    private readonly GrainOptions _options = options.Value;
    private readonly CancellationTokenSource _abort = new();
    private string _poolId = "";
    private TaskScheduler _turns = TaskScheduler.Default;
    private GroupCommitQueue<PendingRegistration> _queue = null!;
    private PoolSettings? _settings;
    private bool _settingsFetching;
    private int _settingsVersion;
    private IDisposable? _subscription;
    private bool _stopping;

    /// <summary>Batches at once: one while the pool serializes registrations or its settings are unknown.</summary>
    private int MaxInFlight => _settings is { SerializeRegistrations: false } ? _options.MaxRegistrationBatchesInFlight : 1;

    public override Task OnActivateAsync(CancellationToken cancellationToken)
    {
        _poolId = this.GetPrimaryKeyString();
        _turns = TaskScheduler.Current;
        _queue = new(
            _options.MaxRegistrationBatchSize,
            new FixedBatchLimit(() => MaxInFlight),
            Post,
            RunBatchAsync,
            Admit,
            pending => pending.Registration.WorkerId,
            slots: storeSlots);
        _subscription = changes.Subscribe(change =>
        {
            if (change.Kind == PoolChangeKind.SettingsChanged && string.Equals(change.PoolId, _poolId, StringComparison.Ordinal))
            {
                Post(() =>
                {
                    settingsCache.Invalidate(_poolId);
                    _settings = null;
                    _settingsVersion++;
                    FetchSettings();
                });
            }
        });
        FetchSettings();
        return Task.CompletedTask;
    }

    public override async Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken)
    {
        _stopping = true;
        _subscription?.Dispose();
        foreach (var pending in _queue.Stop())
        {
            pending.Fail(GrainErrors.Stopping());
        }

        try
        {
            await _queue.WhenInFlightDoneAsync().WaitAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            await _abort.CancelAsync();
            foreach (var pending in _queue.InFlightItems)
            {
                pending.Fail(GrainErrors.OutcomeUnknown("the registration batcher was stopped while the batch was in the store"));
            }
        }
    }

    public Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(registration);

        // Checked per caller: one bad registration must not fail the batch it would have joined.
        if (AllocatorValidation.CheckRegistration(registration) is { } error)
        {
            throw new ArgumentException(error, nameof(registration));
        }

        if (_stopping)
        {
            throw GrainErrors.Stopping();
        }

        cancellationToken.ThrowIfCancellationRequested();
        var pending = new PendingRegistration(registration, time.GetUtcNow() + _options.CallTimeout);
        if (cancellationToken.CanBeCanceled)
        {
            // A registration already in a batch may still be applied; the caller just stops waiting.
            pending.CancellationRegistration = cancellationToken.UnsafeRegister(
                (state, token) =>
                {
                    var canceled = (PendingRegistration)state!;
                    canceled.Completion.TrySetCanceled(token);
                    Post(() => _queue.Remove(canceled));
                },
                pending);
        }

        if (_settings is null)
        {
            FetchSettings(); // unknown (pool created later, or the last read failed): ask again
        }

        _queue.Enqueue(pending);
        return pending.Completion.Task;
    }

    public Task<RegistrationBatcherStatus> GetStatusAsync() =>
        Task.FromResult(new RegistrationBatcherStatus(_queue.Pending, _queue.InFlight, _settings is not null));

    private void Post(Action action) =>
        _ = Task.Factory.StartNew(
            () =>
            {
                try
                {
                    action();
                }
                catch (Exception ex)
                {
                    GrainTelemetry.TurnFailures.Add(1);
                    LogTurnFailed(logger, ex, _poolId);
                }
            },
            CancellationToken.None,
            TaskCreationOptions.None,
            _turns);

    /// <summary>
    /// The queue's admission: a registration goes to the store only while its caller may still be
    /// waiting for it. One past its call's deadline stayed queued that long (behind serialized
    /// batches, or on an instance that hung: issue 47, #3, invariant 14); its worker has timed out and may have
    /// registered again elsewhere since, and was answered an epoch that this one would move past.
    /// Nothing is written for it.
    /// </summary>
    private bool Admit(PendingRegistration pending)
    {
        if (pending.Completion.Task.IsCompleted)
        {
            return false; // its caller gave up
        }

        if (time.GetUtcNow() >= pending.Deadline)
        {
            pending.Fail(GrainErrors.CallTimedOut(_options.CallTimeout, nothingWritten: true));
            return false;
        }

        return true;
    }

    private async Task<TimeSpan?> RunBatchAsync(PendingRegistration[] batch)
    {
        GrainTelemetry.RegistrationBatchSize.Record(batch.Length, new KeyValuePair<string, object?>(AllocatorTelemetry.Tags.Pool, _poolId));
        using var span = GrainTelemetry.StartDetached(GrainTelemetry.RegistrationBatchSpan, default);
        span?.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);
        span?.SetTag(AllocatorTelemetry.Tags.Store, store.Name);
        span?.SetTag(AllocatorTelemetry.Tags.BatchSize, batch.Length);
        try
        {
            IReadOnlyList<WorkerRegistration> registrations = [.. batch.Select(p => p.Registration)];
            var previous = Activity.Current;
            Activity.Current = span;
            Task<IReadOnlyList<RegistrationOutcome>> call;
            try
            {
                call = store.RegisterWorkersAsync(_poolId, registrations, _abort.Token);
            }
            finally
            {
                Activity.Current = previous;
            }

            var outcomes = await call;
            var byId = outcomes.ToDictionary(o => o.WorkerId, StringComparer.Ordinal);
            var changed = false;
            foreach (var pending in batch)
            {
                if (byId.TryGetValue(pending.Registration.WorkerId, out var outcome))
                {
                    changed |= outcome.Status is RegistrationStatus.Created or RegistrationStatus.Updated;
                    pending.Complete(outcome);
                }
                else
                {
                    pending.Fail(new InvalidOperationException($"The store answered no outcome for worker '{pending.Registration.WorkerId}'."));
                }
            }

            if (changed)
            {
                // New or grown workers may be what waiters wait for: tell the pool's grain
                // directly (one-way), wherever in the cluster it lives.
                _ = GrainFactory.GetGrain<IPoolGrain>(_poolId).OnCapacityChangedAsync();
            }

            return TimeSpan.Zero;
        }
        catch (Exception ex)
        {
            span?.SetStatus(ActivityStatusCode.Error, ex.Message);
            span?.AddException(ex);
            foreach (var pending in batch)
            {
                pending.Fail(ex);
            }

            return null;
        }
    }

    private void FetchSettings()
    {
        if (_settingsFetching || _stopping)
        {
            return;
        }

        _settingsFetching = true;
        var version = _settingsVersion;
        _ = settingsCache.GetAsync(_poolId, _abort.Token).AsTask().ContinueWith(
            t =>
            {
                _settingsFetching = false;
                _ = t.Exception; // observed: a failed read only leaves the settings unknown
                if (version != _settingsVersion)
                {
                    FetchSettings(); // changed again meanwhile
                }
                else if (t.IsCompletedSuccessfully && t.Result is { } settings)
                {
                    _settings = settings;
                    if (!_stopping)
                    {
                        _queue.Flush(); // more batches may go now
                    }
                }

                // On failure the batcher stays serialized (the safe choice) until the next change.
            },
            CancellationToken.None,
            TaskContinuationOptions.None,
            _turns);
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "A turn of the registration batcher of pool {Pool} threw; this is a bug.")]
    private static partial void LogTurnFailed(ILogger logger, Exception exception, string pool);

    private sealed class PendingRegistration(WorkerRegistration registration, DateTimeOffset deadline)
    {
        public WorkerRegistration Registration { get; } = registration;

        /// <summary>When its call times out (arrival + <see cref="GrainOptions.CallTimeout"/>): no batch takes it from then on.</summary>
        public DateTimeOffset Deadline { get; } = deadline;

        /// <summary>The caller's answer; continuations run inline, as for <see cref="PendingAllocation.Completion"/>.</summary>
        public TaskCompletionSource<RegistrationOutcome> Completion { get; } = new();

        public CancellationTokenRegistration CancellationRegistration { get; set; }

        public void Complete(RegistrationOutcome outcome)
        {
            CancellationRegistration.Dispose();
            Completion.TrySetResult(outcome);
        }

        public void Fail(Exception exception)
        {
            CancellationRegistration.Dispose();
            Completion.TrySetException(exception);
        }
    }
}
