using Allocator.Storage.InMemory;

namespace Allocator.Grains.Tests.Support;

/// <summary>A manual clock, a recording in-memory store with one pool, and a grain factory over them.</summary>
internal sealed class GrainHarness : IAsyncDisposable
{
    public const string PoolId = "pool-1";

    private GrainHarness(GrainOptions? options)
    {
        Store = new RecordingStore(new InMemoryWorkerStore(Time));
        Grains = new GrainFactory(Store, Store, Time, options);
    }

    public ManualTimeProvider Time { get; } = new();

    public RecordingStore Store { get; }

    public GrainFactory Grains { get; }

    public IPoolGrain Pool => Grains.GetPoolGrain(PoolId);

    public static async Task<GrainHarness> CreateAsync(int workers = 2, int capacity = 100, PoolSettings? settings = null, GrainOptions? options = null)
    {
        var harness = new GrainHarness(options);
        await harness.Store.UpsertPoolAsync(PoolId, settings ?? PoolSettings.Default);
        if (workers > 0)
        {
            await harness.Store.Inner.RegisterWorkersAsync(PoolId, [.. Enumerable.Range(0, workers).Select(i => new WorkerRegistration($"w{i}", $"10.0.0.{i}:7000", capacity))]);
        }

        return harness;
    }

    public async ValueTask DisposeAsync() => await Grains.DisposeAsync();
}
