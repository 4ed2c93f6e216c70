using System.Diagnostics;
using Allocator.Grains.Runtime;
using Allocator.Telemetry;

namespace Allocator.Grains;

/// <summary>
/// The registration batcher of one pool in this instance: registrations arriving together are
/// upserted in store batches (the store locks rows in (pool, worker id) order). A worker id
/// appears at most once per batch and never in two batches in flight at once, so registrations
/// of one worker apply in arrival order. State is touched only in this activation's turns.
/// </summary>
internal sealed class RegistrationBatcher : IRegistrationBatcher, IGrainLifecycle
{
    private readonly IGrainContext _context;
    private readonly IWorkerStore _store;
    private readonly IPoolChangeFeed _changes;
    private readonly GrainOptions _options;
    private readonly string _poolId;
    private readonly LinkedList<PendingRegistration> _pending = new();
    private readonly HashSet<string> _inFlightIds = new(StringComparer.Ordinal);
    private readonly HashSet<Task> _batchTasks = [];
    private readonly HashSet<PendingRegistration[]> _batchesInFlight = [];
    private readonly CancellationTokenSource _abort = new();
    private PoolSettings? _settings;
    private bool _settingsFetching;
    private int _settingsVersion;
    private IDisposable? _subscription;
    private bool _flushPosted;
    private bool _stopping;

    public RegistrationBatcher(IGrainContext context, IWorkerStore store, IPoolChangeFeed changes, GrainOptions options)
    {
        _context = context;
        _store = store;
        _changes = changes;
        _options = options;
        _poolId = context.Key;
    }

    /// <summary>Registrations queued for a batch (a racy read from outside turns; for tests).</summary>
    internal int QueuedCount => _pending.Count;

    /// <summary>Whether the pool's settings have been read (a racy read from outside turns; for tests).</summary>
    internal bool SettingsKnown => Volatile.Read(ref _settings) is not null;

    /// <summary>Batches that may be in flight at once: one while the settings are unknown or ask for serialization.</summary>
    private int MaxInFlight => _settings is { SerializeRegistrations: false } ? _options.MaxRegistrationBatchesInFlight : 1;

    public Task OnActivateAsync(CancellationToken cancellationToken)
    {
        _subscription = _changes.Subscribe(change =>
        {
            if (change.Kind == PoolChangeKind.SettingsChanged && string.Equals(change.PoolId, _poolId, StringComparison.Ordinal))
            {
                _context.Post(() =>
                {
                    _settings = null;
                    _settingsVersion++;
                    FetchSettings();
                });
            }
        });
        FetchSettings();
        return Task.CompletedTask;
    }

    public async Task OnDeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken)
    {
        _stopping = true;
        _subscription?.Dispose();
        foreach (var pending in _pending)
        {
            pending.Fail(GrainErrors.Stopping());
        }

        _pending.Clear();
        try
        {
            await Task.WhenAll(_batchTasks).WaitAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            await _abort.CancelAsync();
            foreach (var pending in _batchesInFlight.SelectMany(b => b))
            {
                pending.Fail(GrainErrors.Stopping());
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
        var pending = new PendingRegistration(registration);
        pending.Node = _pending.AddLast(pending);
        if (cancellationToken.CanBeCanceled)
        {
            // A registration already in a batch may still be applied; the caller just stops waiting.
            pending.CancellationRegistration = cancellationToken.UnsafeRegister(
                (state, token) =>
                {
                    var canceled = (PendingRegistration)state!;
                    canceled.Completion.TrySetCanceled(token);
                    _context.Post(() =>
                    {
                        if (canceled.Node is { } node)
                        {
                            _pending.Remove(node);
                            canceled.Node = null;
                        }
                    });
                },
                pending);
        }

        ScheduleFlush();
        return pending.Completion.Task;
    }

    private void ScheduleFlush()
    {
        if (!_flushPosted)
        {
            _flushPosted = true;
            _context.Post(Flush);
        }
    }

    private void Flush()
    {
        _flushPosted = false;
        if (_settings is null)
        {
            FetchSettings(); // unknown (pool created later, or the last read failed): ask again
        }

        while (!_stopping && _batchesInFlight.Count < MaxInFlight)
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

    private PendingRegistration[] TakeBatch()
    {
        // Oldest first; a worker already in this batch or in one in flight waits for a later batch.
        List<PendingRegistration> batch = [];
        HashSet<string> ids = new(StringComparer.Ordinal);
        var node = _pending.First;
        while (node is not null && batch.Count < _options.MaxRegistrationBatchSize)
        {
            var next = node.Next;
            var pending = node.Value;
            if (pending.Completion.Task.IsCompleted)
            {
                _pending.Remove(node);
                pending.Node = null;
            }
            else if (!_inFlightIds.Contains(pending.Registration.WorkerId) && ids.Add(pending.Registration.WorkerId))
            {
                _pending.Remove(node);
                pending.Node = null;
                batch.Add(pending);
            }

            node = next;
        }

        return [.. batch];
    }

    private async Task RunBatchAsync(PendingRegistration[] batch)
    {
        foreach (var pending in batch)
        {
            _inFlightIds.Add(pending.Registration.WorkerId);
        }

        GrainTelemetry.RegistrationBatchSize.Record(batch.Length, new KeyValuePair<string, object?>(AllocatorTelemetry.Tags.Pool, _poolId));
        using var span = GrainTelemetry.StartDetached(GrainTelemetry.RegistrationBatchSpan, default);
        span?.SetTag(AllocatorTelemetry.Tags.Pool, _poolId);
        span?.SetTag(AllocatorTelemetry.Tags.Store, _store.Name);
        span?.SetTag(AllocatorTelemetry.Tags.BatchSize, batch.Length);
        try
        {
            IReadOnlyList<WorkerRegistration> registrations = [.. batch.Select(p => p.Registration)];
            var previous = Activity.Current;
            Activity.Current = span;
            Task<IReadOnlyList<RegistrationOutcome>> call;
            try
            {
                call = Task.Run(() => _store.RegisterWorkersAsync(_poolId, registrations, _abort.Token));
            }
            finally
            {
                Activity.Current = previous;
            }

            var outcomes = await call;
            var byId = outcomes.ToDictionary(o => o.WorkerId, StringComparer.Ordinal);
            foreach (var pending in batch)
            {
                if (byId.TryGetValue(pending.Registration.WorkerId, out var outcome))
                {
                    pending.Complete(outcome);
                }
                else
                {
                    pending.Fail(new InvalidOperationException($"The store answered no outcome for worker '{pending.Registration.WorkerId}'."));
                }
            }
        }
        catch (Exception ex)
        {
            span?.SetStatus(ActivityStatusCode.Error, ex.Message);
            span?.AddException(ex);
            foreach (var pending in batch)
            {
                pending.Fail(ex);
            }
        }
        finally
        {
            _batchesInFlight.Remove(batch);
            foreach (var pending in batch)
            {
                _inFlightIds.Remove(pending.Registration.WorkerId);
            }

            Flush();
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
        _ = Task.Run(() => _store.GetPoolAsync(_poolId, _abort.Token)).ContinueWith(
            t =>
            {
                _settingsFetching = false;
                _ = t.Exception; // observed: a failed read only leaves the settings unknown
                if (version != _settingsVersion)
                {
                    FetchSettings(); // changed again meanwhile
                }
                else if (t.IsCompletedSuccessfully && t.Result is { } pool)
                {
                    _settings = pool.Settings;
                    Flush();
                }

                // On failure the batcher stays serialized (the safe choice) until the next change.
            },
            CancellationToken.None,
            TaskContinuationOptions.None,
            TaskScheduler.Current);
    }

    private sealed class PendingRegistration(WorkerRegistration registration)
    {
        public WorkerRegistration Registration { get; } = registration;

        public TaskCompletionSource<RegistrationOutcome> Completion { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public CancellationTokenRegistration CancellationRegistration { get; set; }

        public LinkedListNode<PendingRegistration>? Node { get; set; }

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
