using Allocator.Storage.InMemory;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Time.Testing;
using Orleans.TestingHost;

namespace Allocator.Grains.Tests.Support;

/// <summary>
/// An in-process Orleans test cluster (one silo unless asked for more) running Allocator's
/// grains over one recording in-memory store with one pool, all silos sharing the store (as
/// instances share a database). With <c>fakeTime</c> every silo runs on one
/// <see cref="FakeTimeProvider"/> that only the test moves (grain timers included).
/// </summary>
internal sealed class GrainHarness : IAsyncDisposable
{
    public const string PoolId = "pool-1";

    private GrainHarness(InProcessTestCluster cluster, IWorkerStore backend, FakeTimeProvider? time)
    {
        Cluster = cluster;
        Backend = backend;
        FakeTime = time;
    }

    public InProcessTestCluster Cluster { get; }

    /// <summary>The store the silos use.</summary>
    public IWorkerStore Backend { get; }

    /// <summary>The recording in-memory store (the default backend, with the pool and workers the harness was asked for).</summary>
    public RecordingStore Store => Backend as RecordingStore ?? throw new InvalidOperationException("This harness runs on a store given by the test.");

    /// <summary>The clock every silo runs on, when the harness was made with fake time.</summary>
    public FakeTimeProvider Time => FakeTime ?? throw new InvalidOperationException("This harness runs on real time.");

    public FakeTimeProvider? FakeTime { get; }

    /// <summary>The grain factory of the first silo (as the host co-hosted with it uses).</summary>
    public IGrainFactory Grains => GrainsOf(0);

    public IPoolGrain Pool => Grains.GetPoolGrain(PoolId);

    public static async Task<GrainHarness> CreateAsync(
        int workers = 2,
        int capacity = 100,
        PoolSettings? settings = null,
        GrainOptions? options = null,
        short silos = 1,
        bool fakeTime = true,
        IWorkerStore? store = null,
        Action<IServiceCollection>? services = null,
        bool traced = false)
    {
        var time = fakeTime ? new FakeTimeProvider(new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero)) : null;
        var backend = store ?? new RecordingStore(new InMemoryWorkerStore(time ?? TimeProvider.System));

        // The store's change feed, and one settings cache over it (as every store provides).
        var changes = backend as IPoolChangeFeed ?? throw new ArgumentException("The store must also be its change feed.", nameof(store));
        // (The cache listens to the inner store, so that RecordingStore.Subscriptions counts grains only.)
        var settingsCache = new PoolSettingsCache(
            async (pool, ct) => (await backend.GetPoolAsync(pool, ct))?.Settings,
            backend is RecordingStore recorded ? recorded.Inner : changes,
            TimeSpan.FromSeconds(1),
            time);
        var builder = new InProcessTestClusterBuilder(silos);
        builder.ConfigureSiloHost((_, host) =>
        {
            host.Logging.SetMinimumLevel(LogLevel.Warning);
            host.Services.AddSingleton(backend);
            host.Services.AddSingleton(changes);
            host.Services.AddSingleton<IPoolSettingsCache>(settingsCache);
            if (time is not null)
            {
                host.Services.Replace(ServiceDescriptor.Singleton<TimeProvider>(time));
            }

            services?.Invoke(host.Services);
        });
        builder.ConfigureSilo((_, silo) =>
        {
            silo.AddAllocatorGrains(o => Copy(options ?? new GrainOptions(), o));
            if (traced)
            {
                silo.AddActivityPropagation();
            }
        });
        var cluster = builder.Build();
        await cluster.DeployAsync();
        var harness = new GrainHarness(cluster, backend, time);
        if (store is not null)
        {
            return harness; // a store given by the test is provisioned by the test
        }

        await backend.UpsertPoolAsync(PoolId, settings ?? PoolSettings.Default);
        if (workers > 0)
        {
            await (backend is RecordingStore recording ? recording.Inner : backend).RegisterWorkersAsync(PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i}", $"10.0.0.{i}:7000", capacity))]);
        }

        return harness;
    }

    public IGrainFactory GrainsOf(int silo) => Cluster.Silos[silo].ServiceProvider.GetRequiredService<IGrainFactory>();

    /// <summary>The caller the host uses in silo <paramref name="silo"/>: it sends a call again while the pool's grain moves.</summary>
    internal PoolGrainCaller CallerOf(int silo) => Cluster.Silos[silo].ServiceProvider.GetRequiredService<PoolGrainCaller>();

    public async Task<int> WaitersAsync(string pool = PoolId) => (await Grains.GetPoolGrain(pool).GetStatusAsync()).Waiters;

    public async Task<int> QueuedAsync(string pool = PoolId) => (await Grains.GetPoolGrain(pool).GetStatusAsync()).QueuedAllocations;

    public async ValueTask DisposeAsync() => await Cluster.DisposeAsync();

    private static void Copy(GrainOptions from, GrainOptions to)
    {
        to.MaxBatchSize = from.MaxBatchSize;
        to.MaxBatchesInFlight = from.MaxBatchesInFlight;
        to.MaxStoreBatchesInFlight = from.MaxStoreBatchesInFlight;
        to.AdaptiveBatchesInFlight = from.AdaptiveBatchesInFlight;
        to.MaxRegistrationBatchSize = from.MaxRegistrationBatchSize;
        to.MaxRegistrationBatchesInFlight = from.MaxRegistrationBatchesInFlight;
        to.IdleTimeout = from.IdleTimeout;
        to.WaiterRecheckInterval = from.WaiterRecheckInterval;
        to.CallTimeout = from.CallTimeout;
        to.FallbackLease = from.FallbackLease;
        to.DemandWindow = from.DemandWindow;
    }
}
