using System.Collections.Concurrent;
using System.Diagnostics;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

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
/// </remarks>
internal sealed partial class LocalPoolGrains(
    IClusterMembershipService membership,
    ILocalSiloDetails silo,
    ILogger<LocalPoolGrains> logger) : ILifecycleParticipant<ISiloLifecycle>
{
    private readonly ConcurrentDictionary<PoolGrain, byte> _grains = new(ReferenceEqualityComparer.Instance);

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
        lifecycle.Subscribe(nameof(LocalPoolGrains), ServiceLifecycleStage.Active, _ => Task.CompletedTask, HandOverAllAsync);

    private async Task HandOverAllAsync(CancellationToken cancellationToken)
    {
        SiloStopping = true;
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
