using Allocator.Grains.Tests.Support;
using Allocator.Telemetry;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;

namespace Allocator.Grains.Tests;

/// <summary>Callers waiting for capacity: the deadline timer, their answers when the wait ends, and waking them.</summary>
public sealed class CapacityWaitersTests
{
    [Fact]
    public async Task Park_SetsTheDeadlineTimer_ToTheEarliestDeadline_OnlyWhenItChanges()
    {
        var parts = await PoolGrainParts.CreateAsync();

        Park(parts, "a", TimeSpan.FromSeconds(30));
        Park(parts, "b", TimeSpan.FromSeconds(10));
        Park(parts, "c", TimeSpan.FromSeconds(20));

        parts.DeadlineTimer.DueTimes.Should().Equal(TimeSpan.FromSeconds(30), TimeSpan.FromSeconds(10));
        parts.Waiters.Count.Should().Be(3);
    }

    [Fact]
    public async Task Park_TheWaitIsBoundedByThePoolsMaximumWait()
    {
        var parts = await PoolGrainParts.CreateAsync(settings: new PoolSettings { MaxWait = TimeSpan.FromSeconds(5) });

        Park(parts, "a", TimeSpan.FromSeconds(30));

        parts.DeadlineTimer.DueTimes.Should().Equal(TimeSpan.FromSeconds(5));
    }

    [Fact]
    public async Task Expire_AnswersThoseWhoseWaitEnded_WithTheirLastOutcome_AndSetsTheTimerToTheNext()
    {
        var parts = await PoolGrainParts.CreateAsync();
        using var gauge = new MetricCollector<int>(AllocatorTelemetry.Meter, "allocator.waiters");
        var soon = Park(parts, "soon", TimeSpan.FromSeconds(10));
        var later = Park(parts, "later", TimeSpan.FromSeconds(30));
        parts.Time.Advance(TimeSpan.FromSeconds(10));

        await parts.Waiters.ExpireAsync();

        (await soon.Completion.Task).Status.Should().Be(AllocationStatus.NoCapacity);
        later.Completion.Task.IsCompleted.Should().BeFalse();
        parts.DeadlineTimer.DueTimes[^1].Should().Be(TimeSpan.FromSeconds(20));
        Waiting(gauge, parts).Should().Be(1);
    }

    [Fact]
    public async Task CapacityChanged_WakesTheLongestWaiting_OneBatchOfThem_AheadOfNewArrivals()
    {
        var parts = await PoolGrainParts.CreateAsync(options: new GrainOptions { MaxBatchSize = 2 });
        var newcomer = parts.Caller("newcomer");
        var first = Park(parts, "first", TimeSpan.FromSeconds(30));
        var second = Park(parts, "second", TimeSpan.FromSeconds(30));
        Park(parts, "third", TimeSpan.FromSeconds(30));
        parts.Allocations.Enqueue(newcomer);

        parts.Waiters.OnCapacityChanged();

        parts.Allocations.QueuedItems.Should().Equal(first, second, newcomer);
        parts.Waiters.Count.Should().Be(1);
    }

    [Fact]
    public async Task WhileTheGrainStops_NobodyIsWoken()
    {
        var parts = await PoolGrainParts.CreateAsync();
        Park(parts, "a", TimeSpan.FromSeconds(30));
        parts.Stage.Stop(handingOver: true);

        parts.Waiters.OnCapacityChanged();
        await parts.Waiters.RecheckAsync();

        parts.Allocations.Pending.Should().Be(0);
        parts.Waiters.Count.Should().Be(1, "the hand-over answers it");
    }

    [Fact]
    public async Task AfterABatchFoundNoCapacity_OnlyNewsOfCapacityOrTheRecheckWakes()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var a = Park(parts, "a", TimeSpan.FromSeconds(30));
        parts.Waiters.OnFoundNoCapacity();

        parts.Waiters.TryWake();
        parts.Allocations.Pending.Should().Be(0, "a full pool must not spin");

        await parts.Waiters.RecheckAsync();
        parts.Allocations.QueuedItems.Should().Equal(a);
    }

    [Fact]
    public async Task AfterBatch_CapacityFreedWhileTheBatchRan_WakesTheCallersItParked()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var changesAtStart = parts.Waiters.CapacityChanges;
        parts.Waiters.OnCapacityChanged(); // a release while the batch was in the store
        var a = Park(parts, "a", TimeSpan.FromSeconds(30));
        parts.Waiters.OnFoundNoCapacity();

        parts.Waiters.AfterBatch(parkedAny: true, changesAtStart);

        parts.Allocations.QueuedItems.Should().Equal(a);
    }

    [Fact]
    public async Task AfterBatch_NoChangeWhileTheBatchRan_WakesNobody()
    {
        var parts = await PoolGrainParts.CreateAsync();
        Park(parts, "a", TimeSpan.FromSeconds(30));
        parts.Waiters.OnFoundNoCapacity();

        parts.Waiters.AfterBatch(parkedAny: true, parts.Waiters.CapacityChanges);

        parts.Allocations.Pending.Should().Be(0);
    }

    [Fact]
    public async Task Forget_AParkedCaller_LeavesTheQueue_AndTheTimerFollowsTheNextDeadline()
    {
        var parts = await PoolGrainParts.CreateAsync();
        var soon = Park(parts, "soon", TimeSpan.FromSeconds(10));
        Park(parts, "later", TimeSpan.FromSeconds(30));

        parts.Waiters.Forget(soon);

        parts.Waiters.Count.Should().Be(1);
        parts.DeadlineTimer.DueTimes[^1].Should().Be(TimeSpan.FromSeconds(30));
    }

    [Fact]
    public async Task Forget_AWokenCallerStillQueued_LetsTheNextGroupGo()
    {
        var parts = await PoolGrainParts.CreateAsync(options: new GrainOptions { MaxBatchSize = 1 });
        var first = Park(parts, "first", TimeSpan.FromSeconds(30));
        var second = Park(parts, "second", TimeSpan.FromSeconds(30));
        parts.Waiters.OnCapacityChanged();
        parts.Allocations.QueuedItems.Should().Equal(first);

        parts.Waiters.Forget(first);

        parts.Allocations.QueuedItems.Should().Equal(second);
    }

    [Fact]
    public async Task TakeAll_UnparksEveryone_InArrivalOrder_AndTheGaugeFollows()
    {
        var parts = await PoolGrainParts.CreateAsync();
        using var gauge = new MetricCollector<int>(AllocatorTelemetry.Meter, "allocator.waiters");
        var a = Park(parts, "a", TimeSpan.FromSeconds(30));
        var b = Park(parts, "b", TimeSpan.FromSeconds(10));

        parts.Waiters.TakeAll().Should().Equal(a, b);

        parts.Waiters.Count.Should().Be(0);
        Waiting(gauge, parts).Should().Be(0);
    }

    /// <summary>A caller parked as its batch parks it once it found no capacity.</summary>
    private static PendingAllocation Park(PoolGrainParts parts, string key, TimeSpan maxWait)
    {
        var caller = parts.Caller(key, maxWait);
        AllocationRules.MayWait(caller, parts.Settings.Current, parts.Time.GetUtcNow()).Should().BeTrue();
        parts.Waiters.Park(caller, AllocationOutcome.NoCapacity());
        return caller;
    }

    private static int Waiting(MetricCollector<int> gauge, PoolGrainParts parts) =>
        gauge.GetMeasurementSnapshot().Where(m => Equals(m.Tags[AllocatorTelemetry.Tags.Pool], parts.PoolId)).Sum(m => m.Value);
}
