using Allocator.Grains.Tests.Support;
using Allocator.Telemetry;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

namespace Allocator.Grains.Tests;

/// <summary>A release batch in the store, and the releases the grain makes itself of what callers that gave up left behind.</summary>
public sealed class ReleaseBatchRunnerTests
{
    [Fact]
    public async Task Run_AnswersEachCaller_AndCapacityItFreedWakesAWaiterAtOnce()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 2);
        var first = await parts.AllocatedAsync("first");
        var second = await parts.AllocatedAsync("second");
        var waiter = Parked(parts, "waiter");
        var releases = new[] { Release(first), Release(second) };

        var storeTime = await parts.ReleaseBatches.RunAsync(releases);

        storeTime.Should().NotBeNull();
        (await releases[0].Completion.Task).Status.Should().Be(LeaseStatus.Ok);
        (await releases[1].Completion.Task).Status.Should().Be(LeaseStatus.Ok);
        parts.Store.ReleaseBatches.Should().Equal(2);
        parts.Allocations.QueuedItems.Should().Equal([waiter], "woken at once, not after a notification's round trip");
        parts.LeaveIfAskedCalls.Should().Be(1);
    }

    [Fact]
    public async Task Run_NothingReleased_WakesNobody()
    {
        var parts = await PoolGrainParts.CreateAsync(capacity: 1);
        var holder = await parts.AllocatedAsync("holder");
        Parked(parts, "waiter");
        var stale = new PendingRelease(new LeaseRelease(holder.AllocationId, holder.Epoch + 1), span: null);

        await parts.ReleaseBatches.RunAsync([stale]);

        (await stale.Completion.Task).Status.Should().Be(LeaseStatus.StaleEpoch);
        parts.Allocations.Pending.Should().Be(0);
        parts.Waiters.Count.Should().Be(1);
    }

    [Fact]
    public async Task Run_ThePoolIsGone_FailsEveryCaller_AndTheGrainForgetsThePool()
    {
        var parts = await PoolGrainParts.CreateAsync(createPool: false);
        var release = new PendingRelease(new LeaseRelease(Guid.NewGuid(), 1), span: null);

        var storeTime = await parts.ReleaseBatches.RunAsync([release]);

        storeTime.Should().BeNull();
        var wait = () => release.Completion.Task;
        (await wait.Should().ThrowAsync<AllocatorException>()).Which.Kind.Should().Be(AllocatorErrorKind.NotFound);
        parts.PoolMissingCalls.Should().Be(1);
        parts.LeaveIfAskedCalls.Should().Be(0, "as before the split: only a batch the store answered asks");
    }

    [Fact]
    public async Task ReleaseAbandoned_IsSentOnItsOwnWithTheActivationsFence_AndTheKeyIsForgottenOnceItSettled()
    {
        var parts = await PoolGrainParts.CreateAsync();
        using var abandonedReleases = new MetricCollector<long>(AllocatorTelemetry.Meter, "allocator.allocation.abandoned_releases");
        var allocation = await parts.AllocatedAsync("k");
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow()).Should().BeTrue();
        parts.Store.BlockReleases = true;

        parts.ReleaseBatches.ReleaseAbandoned("k", allocation);
        var blocked = await Wait.ForAsync(parts.Store.BlockedRelease(0), "the release to reach the store");
        parts.Releases.Pending.Should().Be(0, "it does not join the queue (issue 47: it carries the activation's fence)");
        parts.ReleaseBatches.DirectInFlight.Should().Be(1);
        blocked.Release();
        await Wait.UntilAsync(() => parts.ReleaseBatches.DirectInFlight == 0, "the release to settle");

        (await parts.IsActiveAsync(allocation)).Should().BeFalse();
        parts.Fence.Value.Should().NotBeNull("the release claimed the pool for this activation first");
        parts.Abandoned.Count.Should().Be(0);
        abandonedReleases.GetMeasurementSnapshot().Where(m => Equals(m.Tags[AllocatorTelemetry.Tags.Pool], parts.PoolId)).Sum(m => m.Value).Should().Be(1);
    }

    [Fact]
    public async Task ReleaseAbandoned_AfterALaterActivationClaimedThePool_EndsNothing_AndIsLogged()
    {
        // Issue 47, #1: this activation was superseded (its instance hung) and its successor may
        // have answered a retry of the key with the allocation.
        var parts = await PoolGrainParts.CreateAsync();
        var allocation = await parts.AllocatedAsync("k");
        await parts.Fence.EnsureAsync(CancellationToken.None);
        await parts.Store.Inner.ClaimPoolActivationAsync(parts.PoolId); // the successor
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow()).Should().BeTrue();

        parts.ReleaseBatches.ReleaseAbandoned("k", allocation);
        await Wait.UntilAsync(() => parts.ReleaseBatches.DirectInFlight == 0, "the release to settle");

        (await parts.IsActiveAsync(allocation)).Should().BeTrue("the store refused the superseded activation's release");
        parts.Logger.Collector.GetSnapshot().Should().Contain(r => r.Message.Contains("answered StaleEpoch", StringComparison.Ordinal));
        parts.Abandoned.Count.Should().Be(0);
    }

    [Fact]
    public async Task ReleaseAbandoned_WhileTheGrainStops_IsSentDirectly_AndDeactivationWaitsForIt()
    {
        // Issue 39, #1: the release queue takes nothing more, but nobody will send this one again.
        var parts = await PoolGrainParts.CreateAsync();
        var allocation = await parts.AllocatedAsync("k");
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow());
        parts.Store.BlockReleases = true;
        parts.Stage.Stop(handingOver: true);

        parts.ReleaseBatches.ReleaseAbandoned("k", allocation);
        var done = parts.ReleaseBatches.WhenDirectReleasesDoneAsync();
        var blocked = await Wait.ForAsync(parts.Store.BlockedRelease(0), "the direct release to reach the store");

        parts.Releases.Pending.Should().Be(0);
        done.IsCompleted.Should().BeFalse();
        blocked.Release();
        await Wait.ForAsync(done, "the direct release to settle");
        (await parts.IsActiveAsync(allocation)).Should().BeFalse();
        await Wait.UntilAsync(() => parts.ReleaseBatches.DirectInFlight == 0, "the settled release to be forgotten");
    }

    [Fact]
    public async Task ReleaseAbandoned_AfterOrleansStoppedWaiting_SendsNothing_AndLeavesItToItsLease()
    {
        // Issue 39, #4: the next activation may already have answered a retry of the key with it.
        var parts = await PoolGrainParts.CreateAsync();
        var allocation = await parts.AllocatedAsync("k");
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow());
        parts.Stage.Stop(handingOver: true);
        parts.Stage.OrleansGaveUp();

        parts.ReleaseBatches.ReleaseAbandoned("k", allocation);

        parts.ReleaseBatches.DirectInFlight.Should().Be(0);
        parts.Store.ReleaseBatches.Should().BeEmpty();
        (await parts.IsActiveAsync(allocation)).Should().BeTrue();
        parts.Abandoned.Count.Should().Be(0);
        parts.Logger.Collector.GetSnapshot().Should().Contain(r => r.Message.StartsWith("Leaving abandoned allocation", StringComparison.Ordinal));
    }

    [Fact]
    public async Task AnAbandonedReleaseTheStoreRefuses_IsLogged_AndARetryHeldBackGoesOn()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var allocation = await parts.AllocatedAsync("k");
        await parts.Store.Inner.ReleaseAsync(parts.PoolId, allocation.AllocationId, allocation.Epoch); // its broker released it meanwhile
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow());
        parts.Store.BlockReleases = true;
        parts.ReleaseBatches.ReleaseAbandoned("k", allocation);
        var blocked = await Wait.ForAsync(parts.Store.BlockedRelease(0), "the release to reach the store");
        var resumed = 0;
        parts.Abandoned.Claim("k", () => resumed++).Should().BeTrue("the release is outstanding: a retry waits for it");

        blocked.Release();
        await Wait.UntilAsync(() => parts.ReleaseBatches.DirectInFlight == 0, "the release to settle");
        parts.RunTurns();

        parts.Logger.Collector.GetSnapshot().Should().Contain(r => r.Message.Contains("answered NotActive", StringComparison.Ordinal));
        parts.Abandoned.Count.Should().Be(0);
        resumed.Should().Be(1);
    }

    [Fact]
    public async Task Fail_OfAnAbandonedRelease_IsLoggedAsAnError_AndForgetsTheKey()
    {
        var parts = await PoolGrainParts.CreateAsync();
        parts.Abandoned.AbandonedAfterAnswer("k", parts.Time.GetUtcNow());
        var release = new PendingRelease(new LeaseRelease(Guid.NewGuid(), 1), span: null, abandonedKey: "k");

        parts.ReleaseBatches.Fail(release, new InvalidOperationException("database down"));

        parts.Abandoned.Count.Should().Be(0);
        parts.Logger.Collector.GetSnapshot().Should().Contain(r => r.Level == Microsoft.Extensions.Logging.LogLevel.Error && r.Message.StartsWith("Could not release abandoned allocation", StringComparison.Ordinal));
        release.Completion.Task.IsFaulted.Should().BeTrue();
    }

    private static PendingRelease Release(Allocation allocation) => new(new LeaseRelease(allocation.AllocationId, allocation.Epoch), span: null);

    /// <summary>A caller parked as its batch parks it once it found no capacity.</summary>
    private static PendingAllocation Parked(PoolGrainParts parts, string key)
    {
        var caller = parts.Caller(key, TimeSpan.FromSeconds(30));
        AllocationRules.MayWait(caller, parts.Settings.Current, parts.Time.GetUtcNow()).Should().BeTrue();
        parts.Waiters.Park(caller, AllocationOutcome.NoCapacity());
        return caller;
    }
}
