using Allocator.Grains.Runtime;

namespace Allocator.Grains;

/// <summary>
/// The grains of this service instance: finds (activating on first call) the pool grain and the
/// registration batcher of any pool, over one <see cref="IWorkerStore"/>. Register one instance
/// as a singleton; dispose it (or call <see cref="StopAsync"/>) on shutdown so that no caller is
/// left waiting.
/// </summary>
/// <example>
/// <code>
/// var grains = new GrainFactory(store, changes, TimeProvider.System, new GrainOptions { MaxBatchSize = 64 });
/// var outcome = await grains.GetPoolGrain("render").AllocateAsync(new AllocationRequest("session-1"), TimeSpan.FromSeconds(5), ct);
/// await grains.StopAsync(shutdownToken);
/// </code>
/// </example>
public sealed class GrainFactory : IGrainFactory, IAsyncDisposable
{
    private readonly IWorkerStore _store;
    private readonly IPoolChangeFeed _changes;
    private readonly TimeProvider _time;
    private readonly GrainOptions _options;

    /// <param name="store">The store every grain reads and writes through.</param>
    /// <param name="changes">The store's pool change notifications (wake waiters, drop cached settings).</param>
    /// <param name="timeProvider">Time for timers, deadlines and idle collection. Default: <see cref="TimeProvider.System"/>.</param>
    /// <param name="options">Options (copied; validated here). Default: <see cref="GrainOptions"/>'s defaults.</param>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public GrainFactory(IWorkerStore store, IPoolChangeFeed changes, TimeProvider? timeProvider = null, GrainOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(store);
        ArgumentNullException.ThrowIfNull(changes);
        _store = store;
        _changes = changes;
        _time = timeProvider ?? TimeProvider.System;
        _options = (options ?? new GrainOptions()).Clone();
        _options.EnsureValid();
        Runtime = new ActivationRuntime(_time, _options.IdleTimeout);
    }

    /// <summary>Live grain activations in this instance (pool grains and registration batchers).</summary>
    public int ActivationCount => Runtime.ActivationCount;

    internal ActivationRuntime Runtime { get; }

    public IPoolGrain GetPoolGrain(string poolId)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return new PoolGrainReference(this, poolId);
    }

    public IRegistrationBatcher GetRegistrationBatcher(string poolId)
    {
        AllocatorValidation.EnsurePoolId(poolId);
        return new RegistrationBatcherReference(this, poolId);
    }

    /// <summary>
    /// Refuses new calls and deactivates every grain: queued and waiting callers fail with
    /// <see cref="AllocatorErrorKind.Unavailable"/> (nothing was done for them); batches already
    /// in the store are awaited and answered. When <paramref name="cancellationToken"/> fires,
    /// their callers fail at once too (the batch may still commit: retry with the same session key).
    /// </summary>
    public Task StopAsync(CancellationToken cancellationToken = default) => Runtime.StopAsync(cancellationToken);

    public ValueTask DisposeAsync() => Runtime.DisposeAsync();

    /// <summary>
    /// A call through the runtime, bounded by <see cref="GrainOptions.CallTimeout"/> plus the wait
    /// the caller asked for; a call that times out is canceled in the grain (a waiter leaves the queue).
    /// </summary>
    private async Task<TResult> CallAsync<TGrain, TResult>(
        string key,
        Func<IGrainContext, TGrain> create,
        Func<TGrain, CancellationToken, Task<TResult>> call,
        TimeSpan extraTime,
        CancellationToken cancellationToken)
        where TGrain : class
    {
        var timeout = _options.CallTimeout + extraTime;
        using var timeoutSource = new CancellationTokenSource(timeout, _time);
        using var linked = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, timeoutSource.Token);
        try
        {
            return await Runtime.InvokeAsync(key, create, grain => call(grain, linked.Token), linked.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (timeoutSource.IsCancellationRequested && !cancellationToken.IsCancellationRequested)
        {
            throw GrainErrors.CallTimedOut(timeout);
        }
    }

    /// <summary>What Orleans would generate: a reference that forwards each call into the activation.</summary>
    private sealed class PoolGrainReference(GrainFactory factory, string poolId) : IPoolGrain
    {
        public int Waiters => factory.Runtime.Find<PoolGrain>(poolId)?.Waiters ?? 0;

        public Task<AllocationOutcome> AllocateAsync(AllocationRequest request, TimeSpan maxWait, CancellationToken cancellationToken = default) =>
            factory.CallAsync<PoolGrain, AllocationOutcome>(
                poolId,
                context => new PoolGrain(context, factory._store, factory._changes, factory._options),
                (grain, token) => grain.AllocateAsync(request, maxWait, token),
                maxWait < TimeSpan.Zero ? TimeSpan.Zero : maxWait > AllocatorLimits.MaxWait ? AllocatorLimits.MaxWait : maxWait,
                cancellationToken);

        public Task<LeaseResult> ReleaseAsync(Guid allocationId, long epoch, CancellationToken cancellationToken = default) =>
            factory.CallAsync<PoolGrain, LeaseResult>(
                poolId,
                context => new PoolGrain(context, factory._store, factory._changes, factory._options),
                (grain, token) => grain.ReleaseAsync(allocationId, epoch, token),
                TimeSpan.Zero,
                cancellationToken);
    }

    private sealed class RegistrationBatcherReference(GrainFactory factory, string poolId) : IRegistrationBatcher
    {
        public Task<RegistrationOutcome> RegisterAsync(WorkerRegistration registration, CancellationToken cancellationToken = default) =>
            factory.CallAsync<RegistrationBatcher, RegistrationOutcome>(
                poolId,
                context => new RegistrationBatcher(context, factory._store, factory._changes, factory._options),
                (grain, token) => grain.RegisterAsync(registration, token),
                TimeSpan.Zero,
                cancellationToken);
    }
}
