using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests;

/// <summary>The pool grain's rules for one request, without a silo: admission, the request the store gets, waiting, settlement.</summary>
public sealed class AllocationRulesTests
{
    private static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);

    [Fact]
    public void BoundedWait_CapsAtTheLongestWaitAllowed()
    {
        AllocationRules.BoundedWait(TimeSpan.FromSeconds(3)).Should().Be(TimeSpan.FromSeconds(3));
        AllocationRules.BoundedWait(AllocatorLimits.MaxWait + TimeSpan.FromDays(1)).Should().Be(AllocatorLimits.MaxWait);
    }

    [Fact]
    public void Admit_AWaitingRequest_GoesAndIsMarkedInTheStore()
    {
        var pending = Pending(callDeadline: Start.AddSeconds(30));

        AllocationRules.Admit(pending, Start).Should().Be(Admission.Go);

        pending.InStore.Should().BeTrue("a caller giving up from now on must hear 'outcome unknown'");
    }

    [Fact]
    public void Admit_ARequestWhoseCallerGaveUp_IsDropped_AndNotInTheStore()
    {
        var pending = Pending(callDeadline: Start.AddSeconds(30));
        pending.TryGiveUp().Should().BeTrue();

        AllocationRules.Admit(pending, Start).Should().Be(Admission.GaveUp);

        pending.InStore.Should().BeFalse();
    }

    [Fact]
    public void Admit_ARequestPastItsCallDeadline_StartsNothing()
    {
        var pending = Pending(callDeadline: Start.AddSeconds(30));

        AllocationRules.Admit(pending, Start.AddSeconds(30)).Should().Be(Admission.PastCallDeadline);

        pending.InStore.Should().BeFalse();
        pending.IsDone.Should().BeFalse("the grain answers it; the rule only decides");
    }

    [Fact]
    public void Admit_AWaiterWokenAfterItsWaitEnded_IsNotServed_ButAWaiterWokenInTimeIs()
    {
        var late = Pending(maxWait: TimeSpan.FromSeconds(5), callDeadline: Start.AddSeconds(35));
        late.WaitDeadline = Start.AddSeconds(5);
        late.LastOutcome = AllocationOutcome.NoCapacity();
        var inTime = Pending(maxWait: TimeSpan.FromSeconds(5), callDeadline: Start.AddSeconds(35));
        inTime.WaitDeadline = Start.AddSeconds(5);
        inTime.LastOutcome = AllocationOutcome.NoCapacity();
        var neverParked = Pending(maxWait: TimeSpan.FromSeconds(5), callDeadline: Start.AddSeconds(35));
        neverParked.WaitDeadline = Start.AddSeconds(5);

        AllocationRules.Admit(late, Start.AddSeconds(5)).Should().Be(Admission.WaitEnded, "a caller may take its key as settled once its wait has ended");
        late.InStore.Should().BeFalse();
        AllocationRules.Admit(inTime, Start.AddSeconds(4.9)).Should().Be(Admission.Go);
        AllocationRules.Admit(neverParked, Start.AddSeconds(6)).Should().Be(Admission.Go, "a first attempt is not a waiter: its wait bounds only how long it may park");
    }

    [Fact]
    public void ForStore_CarriesTheEarlierOfTheCallersDeadlineAndTheCallDeadline()
    {
        var own = Pending(new AllocationRequest("k", Deadline: Start.AddSeconds(5)), callDeadline: Start.AddSeconds(30));
        var late = Pending(new AllocationRequest("k", Deadline: Start.AddSeconds(50)), callDeadline: Start.AddSeconds(30));
        var none = Pending(new AllocationRequest("k"), callDeadline: Start.AddSeconds(30));

        AllocationRules.ForStore(own, TimeSpan.FromHours(1)).Deadline.Should().Be(Start.AddSeconds(5));
        AllocationRules.ForStore(late, TimeSpan.FromHours(1)).Deadline.Should().Be(Start.AddSeconds(30));
        AllocationRules.ForStore(none, TimeSpan.FromHours(1)).Deadline.Should().Be(Start.AddSeconds(30));
    }

    [Fact]
    public void ForStore_ARequestThatNamesALease_KeepsIt()
    {
        var pending = Pending(new AllocationRequest("k", Lease: TimeSpan.FromMinutes(5)));

        var request = AllocationRules.ForStore(pending, TimeSpan.FromHours(24));

        request.Lease.Should().Be(TimeSpan.FromMinutes(5));
    }

    [Fact]
    public void ForStore_ARequestWithoutALease_LeavesThePoolsDefaultToTheStore_WithTheFallbackBehindIt()
    {
        var pending = Pending(new AllocationRequest("k"));

        var request = AllocationRules.ForStore(pending, TimeSpan.FromHours(24));

        request.Lease.Should().BeNull("the pool's default lease is the store's to apply, with the settings it reads as it allocates");
        request.FallbackLease.Should().Be(TimeSpan.FromHours(24));
    }

    [Fact]
    public void MayWait_ACallerThatAskedNotToWait_DoesNot()
    {
        var pending = Pending(maxWait: TimeSpan.Zero);

        AllocationRules.MayWait(pending, new PoolSettings { MaxWait = TimeSpan.FromMinutes(1) }, Start).Should().BeFalse();
    }

    [Fact]
    public void MayWait_IsBoundedByThePoolsMaximumWait_FromArrival()
    {
        var pending = Pending(maxWait: TimeSpan.FromSeconds(10));
        var settings = new PoolSettings { MaxWait = TimeSpan.FromSeconds(4) };

        AllocationRules.MayWait(pending, settings, Start.AddSeconds(1)).Should().BeTrue();

        pending.WaitDeadline.Should().Be(Start.AddSeconds(4));
        AllocationRules.MayWait(pending, settings, Start.AddSeconds(4)).Should().BeFalse();
    }

    [Fact]
    public void MayWait_WhileThePoolsBoundIsUnknown_DoesNotWait()
    {
        var pending = Pending(maxWait: TimeSpan.FromSeconds(10));

        AllocationRules.MayWait(pending, settings: null, Start).Should().BeFalse();

        pending.WaitDeadline.Should().BeNull("fixed only once the pool's bound is known");
    }

    [Fact]
    public void Settle_DecidesByTheCallersStateAndTheOutcome()
    {
        var allocated = new AllocationOutcome(AllocationStatus.Allocated, null, default);
        var full = AllocationOutcome.NoCapacity();

        AllocationRules.Settle(Pending(), allocated, () => throw new InvalidOperationException("not asked")).Should().Be(Settlement.Answer);
        AllocationRules.Settle(Pending(), full, () => true).Should().Be(Settlement.Park);
        AllocationRules.Settle(Pending(), full, () => false).Should().Be(Settlement.Answer);

        var settled = Pending();
        settled.Settled = true;
        AllocationRules.Settle(settled, allocated, () => true).Should().Be(Settlement.AlreadySettled);

        var gone = Pending();
        gone.TryGiveUp();
        AllocationRules.Settle(gone, allocated, () => true).Should().Be(Settlement.CallerGone);
        AllocationRules.Settle(gone, full, () => true).Should().Be(Settlement.CallerGone);
    }

    private static PendingAllocation Pending(AllocationRequest? request = null, TimeSpan? maxWait = null, DateTimeOffset? callDeadline = null) =>
        new(request ?? new AllocationRequest("k"), maxWait ?? TimeSpan.Zero, arrival: 0, Start, new FakeTimeProvider(Start).GetTimestamp(), callDeadline ?? Start.AddSeconds(30));
}
