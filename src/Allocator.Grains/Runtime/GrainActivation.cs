namespace Allocator.Grains.Runtime;

/// <summary>
/// One activation of one grain: the grain instance, its exclusive scheduler and its timers.
/// Everything the grain does runs as turns on <see cref="ActivationScheduler"/>; the fields
/// below marked "turn only" are touched only inside those turns.
/// </summary>
internal sealed class GrainActivation : IGrainContext
{
    private readonly ActivationScheduler _scheduler = new();
    private readonly List<GrainTimer> _timers = []; // turn only
    private readonly Task _activated;
    private object? _grain; // set in the first turn
    private volatile ActivationState _state = ActivationState.Active;

    public GrainActivation(Type grainType, string key, TimeProvider timeProvider, Func<IGrainContext, object> create)
    {
        GrainType = grainType;
        Key = key;
        TimeProvider = timeProvider;
        _activated = RunTurn(async () =>
        {
            _grain = create(this);
            if (_grain is IGrainLifecycle lifecycle)
            {
                await lifecycle.OnActivateAsync(CancellationToken.None);
            }
        });
    }

    public Type GrainType { get; }

    public string Key { get; }

    public TimeProvider TimeProvider { get; }

    /// <summary>Calls started and not yet returned; guarded by the runtime's lock.</summary>
    public int InFlight { get; set; }

    /// <summary>When the last call returned; guarded by the runtime's lock.</summary>
    public DateTimeOffset LastUse { get; set; }

    public bool IsActive => _state == ActivationState.Active;

    /// <summary>The grain instance once activated, for reads that need no turn (counters).</summary>
    public object? Grain => _grain;

    public Task Activated => _activated;

    /// <summary>
    /// Runs <paramref name="call"/> in a turn. The grain's task is handed back as is, so a call
    /// that completes later costs the activation no extra turn.
    /// </summary>
    public Task<TResult> InvokeAsync<TGrain, TResult>(Func<TGrain, Task<TResult>> call) =>
        RunTurn(() => _activated.IsCompletedSuccessfully ? Invoke(call) : InvokeAfterActivationAsync(call));

    private Task<TResult> Invoke<TGrain, TResult>(Func<TGrain, Task<TResult>> call) =>
        _state == ActivationState.Active ? call((TGrain)_grain!) : Task.FromException<TResult>(GrainErrors.Stopping());

    private async Task<TResult> InvokeAfterActivationAsync<TGrain, TResult>(Func<TGrain, Task<TResult>> call)
    {
        await _activated;
        return await Invoke(call);
    }

    public IDisposable RegisterTimer(Func<Task> callback, TimeSpan dueTime, TimeSpan period)
    {
        ArgumentNullException.ThrowIfNull(callback);
        var timer = new GrainTimer(this, callback);
        timer.Start(dueTime, period);
        Post(() => _timers.Add(timer));
        return timer;
    }

    public void Post(Action work)
    {
        ArgumentNullException.ThrowIfNull(work);
        if (_state == ActivationState.Deactivated)
        {
            return;
        }

        _ = RunTurn(() =>
        {
            if (_state != ActivationState.Deactivated)
            {
                work();
            }

            return Task.CompletedTask;
        }).ContinueWith(
            static t => GrainTelemetry.TurnFailures.Add(1),
            CancellationToken.None,
            TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously,
            TaskScheduler.Default);
    }

    /// <summary>Runs the grain's deactivation in a turn, then stops its timers. Idempotent.</summary>
    public Task DeactivateAsync(DeactivationReason reason, CancellationToken cancellationToken) =>
        RunTurn(async () =>
        {
            if (_state != ActivationState.Active)
            {
                return;
            }

            _state = ActivationState.Deactivating;
            try
            {
                try
                {
                    await _activated;
                }
                catch (Exception) when (_grain is null)
                {
                    return; // never activated: nothing to end
                }

                if (_grain is IGrainLifecycle lifecycle)
                {
                    await lifecycle.OnDeactivateAsync(reason, cancellationToken);
                }
            }
            finally
            {
                _state = ActivationState.Deactivated;
                foreach (var timer in _timers)
                {
                    timer.Stop();
                }

                _timers.Clear();
            }
        });

    private Task RunTurn(Func<Task> turn) =>
        Task.Factory.StartNew(turn, CancellationToken.None, TaskCreationOptions.DenyChildAttach, _scheduler).Unwrap();

    private Task<T> RunTurn<T>(Func<Task<T>> turn) =>
        Task.Factory.StartNew(turn, CancellationToken.None, TaskCreationOptions.DenyChildAttach, _scheduler).Unwrap();

    private enum ActivationState
    {
        Active,
        Deactivating,
        Deactivated,
    }

    private sealed class GrainTimer(GrainActivation owner, Func<Task> callback) : IDisposable
    {
        private ITimer? _timer;
        private volatile bool _stopped;

        public void Start(TimeSpan dueTime, TimeSpan period)
        {
            // The callback only posts a turn; the grain's code runs in its own activation.
            _timer = owner.TimeProvider.CreateTimer(static s => ((GrainTimer)s!).Tick(), this, dueTime, period);
        }

        public void Stop()
        {
            _stopped = true;
            _timer?.Dispose();
        }

        public void Dispose()
        {
            Stop();
            owner.Post(() => owner._timers.Remove(this));
        }

        private void Tick()
        {
            if (_stopped || owner._state != ActivationState.Active)
            {
                return;
            }

            _ = owner.RunTurn(async () =>
            {
                if (!_stopped && owner._state == ActivationState.Active)
                {
                    await callback();
                }
            }).ContinueWith(
                static t => GrainTelemetry.TurnFailures.Add(1),
                CancellationToken.None,
                TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously,
                TaskScheduler.Default);
        }
    }
}
