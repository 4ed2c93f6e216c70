using Allocator.Storage.InMemory;

namespace Allocator.Grains.Tests;

public sealed class GrainOptionsTests
{
    [Fact]
    public void Defaults_AreValidAndDocumented()
    {
        var options = new GrainOptions();

        options.Validate().Should().BeEmpty();
        options.MaxBatchSize.Should().Be(64);
        options.MaxBatchesInFlight.Should().Be(16);
        options.AdaptiveBatchesInFlight.Should().BeTrue();
        options.MaxRegistrationBatchSize.Should().Be(500);
        options.MaxRegistrationBatchesInFlight.Should().Be(4);
        options.IdleTimeout.Should().Be(TimeSpan.FromMinutes(5));
        options.WaiterRecheckInterval.Should().Be(TimeSpan.FromSeconds(1));
        options.CallTimeout.Should().Be(TimeSpan.FromSeconds(30));
    }

    [Fact]
    public void Validate_OutOfRange_NamesEveryProblem()
    {
        var options = new GrainOptions
        {
            MaxBatchSize = AllocatorLimits.MaxBatchSize + 1,
            MaxBatchesInFlight = 0,
            MaxRegistrationBatchSize = 0,
            MaxRegistrationBatchesInFlight = 65,
            IdleTimeout = TimeSpan.Zero,
            WaiterRecheckInterval = TimeSpan.FromHours(1),
            CallTimeout = TimeSpan.FromMilliseconds(1),
        };

        options.Validate().Should().HaveCount(7);
        var store = new InMemoryWorkerStore();
        var create = () => new GrainFactory(store, store, TimeProvider.System, options);
        create.Should().Throw<ArgumentException>().WithMessage("*MaxBatchSize*CallTimeout*");
    }

    [Fact]
    public async Task GrainFactory_CopiesOptions()
    {
        var options = new GrainOptions();
        var store = new InMemoryWorkerStore();
        await using var grains = new GrainFactory(store, store, TimeProvider.System, options);

        options.MaxBatchSize = 0; // a later change to the caller's object changes nothing

        grains.GetPoolGrain("p").Should().NotBeNull();
    }

    [Fact]
    public async Task GrainFactory_InvalidPoolId_Throws()
    {
        var store = new InMemoryWorkerStore();
        await using var grains = new GrainFactory(store, store);

        var pool = () => grains.GetPoolGrain("");
        var batcher = () => grains.GetRegistrationBatcher(new string('x', AllocatorLimits.MaxIdLength + 1));

        pool.Should().Throw<ArgumentException>();
        batcher.Should().Throw<ArgumentException>();
    }
}
