using System.Collections.Concurrent;
using Microsoft.Extensions.DependencyInjection;
using Orleans.Runtime;

namespace Allocator.Grains;

/// <summary>
/// The pool grains active in this silo, so that a silo that is shutting down can tell them first.
/// </summary>
/// <remarks>
/// Orleans deactivates an activation only once it has no request running, and a parked waiter is
/// a running request (for up to its maximum wait). Without this, a stopping silo would hold its
/// waiters until their deadlines, or until the deactivation timeout cut them off with no answer.
/// When the silo leaves its active stage, before Orleans deactivates grains, every pool grain
/// here answers its queued and parked callers "unavailable, nothing was done, retry" (they retry
/// on another instance) and lets the batches already in the store finish.
/// </remarks>
internal sealed class LocalPoolGrains : ILifecycleParticipant<ISiloLifecycle>
{
    private readonly ConcurrentDictionary<PoolGrain, byte> _grains = new(ReferenceEqualityComparer.Instance);

    public bool SiloStopping { get; private set; }

    public void Add(PoolGrain grain) => _grains.TryAdd(grain, 0);

    public void Remove(PoolGrain grain) => _grains.TryRemove(grain, out _);

    public void Participate(ISiloLifecycle lifecycle) =>
        lifecycle.Subscribe(
            nameof(LocalPoolGrains),
            ServiceLifecycleStage.Active,
            _ => Task.CompletedTask,
            _ =>
            {
                SiloStopping = true;
                foreach (var grain in _grains.Keys)
                {
                    grain.BeginStopping();
                }

                return Task.CompletedTask;
            });

    internal static void AddTo(IServiceCollection services)
    {
        services.AddSingleton<LocalPoolGrains>();
        services.AddSingleton<ILifecycleParticipant<ISiloLifecycle>>(sp => sp.GetRequiredService<LocalPoolGrains>());
    }
}
