using System.Collections.Concurrent;
using System.Diagnostics;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Orleans.Runtime.Diagnostics;

namespace Allocator.Grains;

/// <summary>
/// The pool grains active in this silo, so that a silo that is stopping can hand them over first.
/// </summary>
/// <remarks>
/// Orleans deactivates an activation only once it has no request running, and a parked waiter is
/// a running request (for up to its maximum wait). When the silo leaves its active stage, before
/// Orleans deactivates grains and before the silo leaves the cluster's membership, every pool
/// grain here answers its queued and parked callers "moved, nothing was done" (their
/// <see cref="PoolGrainCaller"/> sends them again), lets the batches already in the store finish
/// and answer, and migrates to another active silo (Orleans' live grain migration): calls that
/// arrive meanwhile wait in Orleans' queue for the activation and are forwarded to the new one.
/// With no other silo (a cluster of one) the callers are answered "unavailable, nothing was done".
/// <para>
/// Orleans also deactivates a pool grain for reasons of its own while its silo runs on: Orleans'
/// default grain directory deactivates every activation whose directory entry lived on a silo
/// that is leaving (in a rolling restart, grains on the instances that stay), and a migration
/// forwards the calls waiting for it. Such a grain would otherwise wait, deactivating, until its
/// parked callers' deadlines, with every new call queued behind them; Orleans' grain lifecycle
/// events (<see cref="GrainLifecycleEvents"/>, "Deactivating") tell it to answer them "moved" at once.
/// </para>
/// </remarks>
internal sealed partial class LocalPoolGrains(
    IClusterMembershipService membership,
    ILocalSiloDetails silo,
    ILogger<LocalPoolGrains> logger) : ILifecycleParticipant<ISiloLifecycle>
{
    private readonly ConcurrentDictionary<PoolGrain, byte> _grains = new(ReferenceEqualityComparer.Instance);
    private IDisposable? _listeners;
    private IDisposable? _deactivations;

    public bool SiloStopping { get; private set; }

    public void Add(PoolGrain grain) => _grains.TryAdd(grain, 0);

    public void Remove(PoolGrain grain) => _grains.TryRemove(grain, out _);

    /// <summary>The silo a pool's grain moves to when this one stops; null when there is none.</summary>
    public SiloAddress? SuccessorFor(string poolId) => SuccessorFor(poolId, Successors(membership.CurrentSnapshot, silo.SiloAddress));

    /// <summary>The active silos other than <paramref name="self"/>, in a fixed order.</summary>
    internal static IReadOnlyList<SiloAddress> Successors(ClusterMembershipSnapshot snapshot, SiloAddress self) =>
        [.. snapshot.Members.Values
            .Where(m => m.Status == SiloStatus.Active && !m.SiloAddress.Equals(self))
            .Select(m => m.SiloAddress)
            .OrderBy(a => a.ToParsableString(), StringComparer.Ordinal)];

    /// <summary>
    /// One of <paramref name="candidates"/>, the same for a pool whatever the order of calls, and
    /// spread over them pool by pool, so that the pools of a stopping silo do not all land on one.
    /// </summary>
    internal static SiloAddress? SuccessorFor(string poolId, IReadOnlyList<SiloAddress> candidates)
    {
        if (candidates.Count == 0)
        {
            return null;
        }

        // FNV-1a: string.GetHashCode differs between processes.
        var hash = 2166136261u;
        foreach (var c in poolId)
        {
            hash = (hash ^ c) * 16777619u;
        }

        return candidates[(int)(hash % (uint)candidates.Count)];
    }

    public void Participate(ISiloLifecycle lifecycle) =>
        lifecycle.Subscribe(nameof(LocalPoolGrains), ServiceLifecycleStage.Active, WatchDeactivations, HandOverAllAsync);

    private Task WatchDeactivations(CancellationToken cancellationToken)
    {
        _listeners = DiagnosticListener.AllListeners.Subscribe(new Observer<DiagnosticListener>(listener =>
        {
            if (listener.Name == GrainLifecycleEvents.ListenerName)
            {
                _deactivations = listener.Subscribe(
                    new Observer<KeyValuePair<string, object?>>(e => OnLifecycleEvent(e.Value)),
                    name => name == nameof(GrainLifecycleEvents.Deactivating));
            }
        }));
        return Task.CompletedTask;
    }

    /// <summary>Orleans' thread, inside the activation's lock: only queue a turn.</summary>
    private void OnLifecycleEvent(object? payload)
    {
        if (payload is GrainLifecycleEvents.Deactivating { GrainContext.GrainInstance: PoolGrain grain } deactivating && _grains.ContainsKey(grain))
        {
            grain.OnDeactivating(deactivating.Reason);
        }
    }

    private async Task HandOverAllAsync(CancellationToken cancellationToken)
    {
        SiloStopping = true;
        _deactivations?.Dispose();
        _listeners?.Dispose();
        var started = Stopwatch.GetTimestamp();
        var successors = Successors(membership.CurrentSnapshot, silo.SiloAddress);
        List<Task> moving = [];
        foreach (var grain in _grains.Keys)
        {
            var successor = SuccessorFor(grain.PoolId, successors);
            grain.HandOver(successor);
            if (successor is not null)
            {
                moving.Add(grain.Deactivated);
            }
        }

        if (moving.Count == 0)
        {
            return;
        }

        // Once the batches in the store have answered, each grain deactivates and moves. Waiting
        // here keeps this silo in the cluster (and its messaging up) until then; Orleans'
        // shutdown, which would deactivate them anyway, bounds the wait.
        try
        {
            await Task.WhenAll(moving).WaitAsync(cancellationToken);
            LogHandedOver(logger, moving.Count, successors.Count, Stopwatch.GetElapsedTime(started).TotalMilliseconds);
        }
        catch (OperationCanceledException)
        {
            LogHandOverCutShort(logger, moving.Count(t => !t.IsCompleted), moving.Count);
        }
    }

    private sealed class Observer<T>(Action<T> onNext) : IObserver<T>
    {
        public void OnCompleted()
        {
        }

        public void OnError(Exception error)
        {
        }

        public void OnNext(T value) => onNext(value);
    }

    internal static void AddTo(IServiceCollection services)
    {
        services.AddSingleton<LocalPoolGrains>();
        services.AddSingleton<ILifecycleParticipant<ISiloLifecycle>>(sp => sp.GetRequiredService<LocalPoolGrains>());
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Silo stopping: {Count} pool grain(s) handed over to {Silos} other silo(s) in {Milliseconds:0} ms.")]
    private static partial void LogHandedOver(ILogger logger, int count, int silos, double milliseconds);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Silo stopping: the shutdown was cut short with {Left} of {Count} pool grain(s) still moving; Orleans deactivates them.")]
    private static partial void LogHandOverCutShort(ILogger logger, int left, int count);
}
