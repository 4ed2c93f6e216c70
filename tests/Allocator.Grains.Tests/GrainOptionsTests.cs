using Allocator.Grains.Tests.Support;
using Allocator.Networking;
using Allocator.Storage.InMemory;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Options;
using Orleans.Configuration;
using Orleans.Serialization.Configuration;

namespace Allocator.Grains.Tests;

public sealed class GrainOptionsTests
{
    [Fact]
    public void Defaults_AreValidAndDocumented()
    {
        var options = new GrainOptions();

        options.Validate().Should().BeEmpty();
        options.MaxBatchSize.Should().Be(256);
        options.MaxStoreBatchesInFlight.Should().Be(0, "taken from the store's connections");
        options.MaxBatchesInFlight.Should().Be(16);
        options.AdaptiveBatchesInFlight.Should().BeTrue();
        options.MaxRegistrationBatchSize.Should().Be(500);
        options.MaxRegistrationBatchesInFlight.Should().Be(4);
        options.IdleTimeout.Should().Be(TimeSpan.FromMinutes(5));
        options.WaiterRecheckInterval.Should().Be(TimeSpan.FromSeconds(1));
        options.CallTimeout.Should().Be(TimeSpan.FromSeconds(30));
        options.FallbackLease.Should().Be(TimeSpan.FromHours(24));
        options.DemandWindow.Should().Be(TimeSpan.FromSeconds(60));
    }

    [Fact]
    public async Task Validate_OutOfRange_NamesEveryProblemAndFailsTheSilosStart()
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
            FallbackLease = TimeSpan.Zero,
            DemandWindow = TimeSpan.FromHours(2),
        };

        options.Validate().Should().HaveCount(9);
        using var host = BuildSilo(o =>
        {
            o.MaxBatchSize = options.MaxBatchSize;
            o.CallTimeout = options.CallTimeout;
        });
        var start = () => host.StartAsync();
        (await start.Should().ThrowAsync<OptionsValidationException>()).WithMessage("*MaxBatchSize*CallTimeout*");
    }

    [Fact]
    public void AddAllocatorGrains_SetsTheOrleansOptionsTheGrainsRelyOn()
    {
        using var host = BuildSilo(o =>
        {
            o.IdleTimeout = TimeSpan.FromSeconds(20);
            o.CallTimeout = TimeSpan.FromSeconds(7);
        });

        var collection = host.Services.GetRequiredService<IOptions<GrainCollectionOptions>>().Value;
        collection.CollectionAge.Should().Be(TimeSpan.FromSeconds(20));
        collection.CollectionQuantum.Should().BeLessThan(collection.CollectionAge, "Orleans requires the quantum below the age");
        collection.DeactivationTimeout.Should().BeGreaterThanOrEqualTo(TimeSpan.FromSeconds(14), "a stopping grain waits for a batch in the store and the releases it sends itself (twice the call timeout)");
        var messaging = host.Services.GetRequiredService<IOptions<SiloMessagingOptions>>().Value;
        messaging.ResponseTimeout.Should().Be(TimeSpan.FromSeconds(7));
        messaging.CancelRequestOnTimeout.Should().BeTrue();
        messaging.WaitForCancellationAcknowledgement.Should().BeTrue("a canceled caller must hear the grain's answer, never 'canceled' while its allocation commits");
        host.Services.GetRequiredService<IOptions<TypeManifestOptions>>().Value.EnableConfigurationAnalysis.Should().BeTrue();
        var versioning = host.Services.GetRequiredService<IOptions<GrainVersioningOptions>>().Value;
        versioning.DefaultCompatibilityStrategy.Should().Be("BackwardCompatible", "a newer interface version serves older callers (ADR 0026)");
        versioning.DefaultVersionSelectorStrategy.Should().Be("LatestVersion", "new activations go to the newest silos, so a grain moves once per upgrade");
    }

    [Fact]
    public void GetPoolGrain_InvalidPoolId_Throws()
    {
        using var host = BuildSilo(null);
        var grains = host.Services.GetRequiredService<IGrainFactory>();

        var pool = () => grains.GetPoolGrain("");
        var batcher = () => grains.GetRegistrationBatcher(new string('x', AllocatorLimits.MaxIdLength + 1));

        pool.Should().Throw<ArgumentException>();
        batcher.Should().Throw<ArgumentException>();
    }

    private static IHost BuildSilo(Action<GrainOptions>? configure)
    {
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { EnvironmentName = "Production" });
        builder.Services.AddAllocatorInMemory();
        builder.UseOrleans(silo => silo.UseLocalhostClustering(siloPort: FreePort.Next(), gatewayPort: 0).AddAllocatorGrains(configure));
        return builder.Build();
    }
}
