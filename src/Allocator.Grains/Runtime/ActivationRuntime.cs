namespace Allocator.Grains.Runtime;

/// <summary>
/// The activation layer: at most one activation per (grain type, key) in this process, created
/// on first call, deactivated after <see cref="GrainOptions.IdleTimeout"/> without calls, all
/// deactivated by <see cref="StopAsync"/>.
/// </summary>
internal sealed class ActivationRuntime : IAsyncDisposable
{
    private readonly object _sync = new();
    private readonly Dictionary<(Type, string), GrainActivation> _activations = [];
    private readonly HashSet<Task> _deactivations = [];
    private readonly TimeProvider _time;
    private readonly TimeSpan _idleTimeout;
    private readonly ITimer _collector;
    private Task? _stopped;

    public ActivationRuntime(TimeProvider timeProvider, TimeSpan idleTimeout)
    {
        _time = timeProvider;
        _idleTimeout = idleTimeout;

        // Look for idle activations a few times per idle timeout: one may live up to 1.5 × the timeout.
        var period = idleTimeout / 2;
        _collector = _time.CreateTimer(static s => ((ActivationRuntime)s!).CollectIdle(), this, period, period);
    }

    public int ActivationCount
    {
        get
        {
            lock (_sync)
            {
                return _activations.Count;
            }
        }
    }

    /// <summary>The activation of a grain if one is live, without creating one.</summary>
    public TGrain? Find<TGrain>(string key)
        where TGrain : class
    {
        lock (_sync)
        {
            return _activations.GetValueOrDefault((typeof(TGrain), key))?.Grain as TGrain;
        }
    }

    /// <summary>
    /// Calls <paramref name="call"/> in a turn of the grain's activation, activating it with
    /// <paramref name="create"/> if needed. The activation counts the call as in flight until
    /// it returns, so it is never deactivated for idleness under a caller.
    /// </summary>
    public async Task<TResult> InvokeAsync<TGrain, TResult>(
        string key,
        Func<IGrainContext, TGrain> create,
        Func<TGrain, Task<TResult>> call,
        CancellationToken cancellationToken)
        where TGrain : class
    {
        GrainActivation activation;
        lock (_sync)
        {
            if (_stopped is not null)
            {
                throw GrainErrors.Stopping();
            }

            if (!_activations.TryGetValue((typeof(TGrain), key), out activation!))
            {
                activation = new GrainActivation(typeof(TGrain), key, _time, create) { LastUse = _time.GetUtcNow() };
                _activations.Add((typeof(TGrain), key), activation);
                _ = activation.Activated.ContinueWith(
                    (_, s) => Remove((GrainActivation)s!),
                    activation,
                    CancellationToken.None,
                    TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously,
                    TaskScheduler.Default);
            }

            activation.InFlight++;
        }

        try
        {
            // WaitAsync: a caller that gives up never waits on the activation.
            return await activation.InvokeAsync(call).WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            lock (_sync)
            {
                activation.InFlight--;
                activation.LastUse = _time.GetUtcNow();
            }
        }
    }

    /// <summary>
    /// Refuses new calls and deactivates every activation. Grains finish or fail the calls they
    /// hold; when <paramref name="cancellationToken"/> fires they stop waiting and fail the rest.
    /// </summary>
    public Task StopAsync(CancellationToken cancellationToken = default)
    {
        List<GrainActivation> all;
        List<Task> pending;
        lock (_sync)
        {
            if (_stopped is not null)
            {
                return _stopped;
            }

            all = [.. _activations.Values];
            _activations.Clear();
            pending = [.. _deactivations];
            _stopped = StopCoreAsync(all, pending, cancellationToken);
            return _stopped;
        }
    }

    public async ValueTask DisposeAsync() => await StopAsync().ConfigureAwait(false);

    /// <summary>One pass of idle collection (the timer calls it; tests may too).</summary>
    internal int CollectIdle()
    {
        var now = _time.GetUtcNow();
        List<GrainActivation> idle = [];
        lock (_sync)
        {
            if (_stopped is not null)
            {
                return 0;
            }

            foreach (var activation in _activations.Values)
            {
                if (activation.InFlight == 0 && activation.Activated.IsCompleted && now - activation.LastUse >= _idleTimeout)
                {
                    idle.Add(activation);
                }
            }

            foreach (var activation in idle)
            {
                _activations.Remove((activation.GrainType, activation.Key));
                var deactivation = activation.DeactivateAsync(DeactivationReason.Idle, CancellationToken.None);
                _deactivations.Add(deactivation);
                _ = deactivation.ContinueWith(
                    (t, s) =>
                    {
                        var runtime = (ActivationRuntime)s!;
                        lock (runtime._sync)
                        {
                            runtime._deactivations.Remove(t);
                        }
                    },
                    this,
                    CancellationToken.None,
                    TaskContinuationOptions.ExecuteSynchronously,
                    TaskScheduler.Default);
            }
        }

        return idle.Count;
    }

    private async Task StopCoreAsync(List<GrainActivation> activations, List<Task> pending, CancellationToken cancellationToken)
    {
        await _collector.DisposeAsync().ConfigureAwait(false);
        var deactivations = activations.Select(a => a.DeactivateAsync(DeactivationReason.Shutdown, cancellationToken)).Concat(pending);

        // Deactivation failures are the grains' to report; stopping goes on regardless.
        await Task.WhenAll(deactivations).ContinueWith(static _ => { }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default).ConfigureAwait(false);
    }

    private void Remove(GrainActivation activation)
    {
        lock (_sync)
        {
            if (_activations.TryGetValue((activation.GrainType, activation.Key), out var current) && ReferenceEquals(current, activation))
            {
                _activations.Remove((activation.GrainType, activation.Key));
            }
        }
    }
}
