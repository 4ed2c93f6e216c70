using Allocator.Grains.Tests.Support;
using Orleans.Runtime;

namespace Allocator.Grains.Tests;

/// <summary>
/// Issue 22, #2: a call on a pool that does not exist leaves nothing lasting behind: no grain
/// activation, no timer, no change-feed subscription (each was kept for the idle timeout, ~14 KB a
/// name: a million well-formed unknown names ran a host out of memory).
/// </summary>
public sealed class UnknownPoolTests
{
    [Fact]
    public async Task AllocateAndRelease_OnAnUnknownPool_AnswerNotFound_AndLeaveNoActivationBehind()
    {
        await using var h = await GrainHarness.CreateAsync();
        var unknown = h.Grains.GetPoolGrain("no-such-pool");

        var allocate = () => Wait.ForAsync(unknown.AllocateAsync(new AllocationRequest("k"), TimeSpan.Zero), "the allocation on an unknown pool");
        (await allocate.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
        var release = () => Wait.ForAsync(unknown.ReleaseAsync(Guid.NewGuid(), 1), "the release on an unknown pool");
        (await release.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);

        h.Store.Subscriptions.Should().Be(0, "nothing subscribes to the changes of a pool that does not exist");
        await Wait.UntilAsync(async () => await PoolActivationsAsync(h) == 0, "the unknown pool's grain to deactivate");
    }

    [Fact]
    public async Task APoolCreatedAfterACallFoundItMissing_IsServedByTheNextCall()
    {
        await using var h = await GrainHarness.CreateAsync();
        var later = h.Grains.GetPoolGrain("created-later");
        var early = () => later.AllocateAsync(new AllocationRequest("k"), TimeSpan.Zero);
        await early.Should().ThrowAsync<AllocatorException>();

        await h.Store.UpsertPoolAsync("created-later", PoolSettings.Default);
        await h.Store.Inner.RegisterWorkersAsync("created-later", [new WorkerRegistration("w0", "10.0.0.1:1", 1)]);

        (await Wait.ForAsync(later.AllocateAsync(new AllocationRequest("k"), TimeSpan.Zero), "the allocation once the pool exists")).Status.Should().Be(AllocationStatus.Allocated);
        h.Store.Subscriptions.Should().Be(1, "a grain of a pool that exists subscribes to its changes");
    }

    private static async Task<int> PoolActivationsAsync(GrainHarness h)
    {
        var statistics = await h.Grains.GetGrain<IManagementGrain>(0).GetSimpleGrainStatistics();
        return statistics.Where(s => s.GrainType.Contains("PoolGrain", StringComparison.Ordinal)).Sum(s => s.ActivationCount);
    }
}
