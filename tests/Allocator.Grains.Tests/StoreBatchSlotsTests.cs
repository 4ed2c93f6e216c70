using Allocator.Telemetry;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using Microsoft.Extensions.Time.Testing;

namespace Allocator.Grains.Tests;

/// <summary>The silo's store slots alone: who holds one, who waits, who gets the next.</summary>
public sealed class StoreBatchSlotsTests
{
    [Fact]
    public void FreeSlots_AreTaken_UntilNoneIsLeft_ThenCallersWaitInLine()
    {
        var slots = new StoreBatchSlots(2);

        slots.TryTake(() => { }, out _).Should().BeTrue();
        slots.TryTake(() => { }, out _).Should().BeTrue();
        slots.TryTake(() => { }, out var place).Should().BeFalse();

        place.Should().NotBeNull();
        slots.Free.Should().Be(0);
        slots.Waiting.Should().Be(1);
    }

    [Fact]
    public void ASlotGivenBack_GoesToTheFirstInLine_NotToTheFreeOnes()
    {
        var slots = new StoreBatchSlots(1);
        slots.TryTake(() => { }, out _).Should().BeTrue();
        var granted = new List<string>();
        slots.TryTake(() => granted.Add("first"), out var first).Should().BeFalse();
        slots.TryTake(() => granted.Add("second"), out var second).Should().BeFalse();

        slots.Return();

        granted.Should().Equal("first");
        first!.TakeGrant().Should().BeTrue();
        first.TakeGrant().Should().BeFalse("a grant is taken once");
        second!.TakeGrant().Should().BeFalse();
        slots.Free.Should().Be(0, "the slot went from one holder to the next");
        slots.TryTake(() => { }, out _).Should().BeFalse("a newcomer does not pass the queue still in line");
    }

    [Fact]
    public void LeavingTheLine_BeforeAGrant_HoldsNothing_AndTheNextSlotGoesFree()
    {
        var slots = new StoreBatchSlots(1);
        slots.TryTake(() => { }, out _);
        slots.TryTake(() => throw new InvalidOperationException("left the line"), out var place);

        slots.Leave(place!).Should().BeFalse();
        slots.Return();

        slots.Free.Should().Be(1);
        slots.Waiting.Should().Be(0);
    }

    [Fact]
    public void LeavingTheLine_AfterAGrant_HandsTheSlotToTheLeaver()
    {
        var slots = new StoreBatchSlots(1);
        slots.TryTake(() => { }, out _);
        slots.TryTake(() => { }, out var place);
        slots.Return();

        slots.Leave(place!).Should().BeTrue("the slot was handed over: the leaver gives it back");
        slots.Return();

        slots.Free.Should().Be(1);
    }

    [Fact]
    public void ASlotGivenBackThatNobodyHeld_Throws()
    {
        var slots = new StoreBatchSlots(1);

        var act = slots.Return;

        act.Should().Throw<InvalidOperationException>();
    }

    [Theory]
    [InlineData(16, 11, false)] // 5 free of 16: more than a quarter
    [InlineData(16, 12, true)]  // 4 free: a quarter
    [InlineData(16, 16, false)] // none free: a batch waits in line, gathering there
    [InlineData(3, 2, true)]    // a few slots: the last one
    [InlineData(3, 1, false)]
    public void LastFree_OnlyTheLastQuarterOfTheSlotsOrTheLastOneIsFree(int count, int taken, bool expected)
    {
        var slots = new StoreBatchSlots(count);
        for (var i = 0; i < taken; i++)
        {
            slots.TryTake(() => { }, out _).Should().BeTrue();
        }

        slots.LastFree.Should().Be(expected);
    }

    [Fact]
    public void LastFree_NotWhileQueuesWaitInLine_NorWithoutALimit()
    {
        var slots = new StoreBatchSlots(1);
        slots.TryTake(() => { }, out _);
        slots.TryTake(() => { }, out var place);
        slots.Return(); // handed to the place in line, not freed
        slots.LastFree.Should().BeFalse();

        new StoreBatchSlots(0).LastFree.Should().BeFalse("no limit: no slot is ever the last");
        place!.TakeGrant().Should().BeTrue();
    }

    [Fact]
    public void NoCount_IsNoLimit()
    {
        new StoreBatchSlots(0).Limited.Should().BeFalse();
        new StoreBatchSlots(3).Limited.Should().BeTrue();
    }

    [Theory]
    [InlineData(0, null, 0)]
    [InlineData(0, 16, 12)]
    [InlineData(0, 100, 75)]
    [InlineData(0, 4, 2)]
    [InlineData(0, 2, 1)]
    [InlineData(0, 1, 1)]
    [InlineData(9, 100, 9)]
    [InlineData(9, null, 9)]
    public void SlotCount_IsTheConfiguredOne_OrTheStoresConnectionsLessAQuarter(int configured, int? connections, int expected) =>
        StoreBatchSlots.CountFor(configured, connections).Should().Be(expected);

    [Fact]
    public void AWaitInLine_IsRecordedWhenTheSlotIsHandedOver_FromWhenThePlaceJoined()
    {
        // The histogram has no attributes and other tests' silos record into it meanwhile: the
        // fake clock's waits are long enough to be told from theirs.
        using var waits = new MetricCollector<double>(AllocatorTelemetry.Meter, "allocator.store.slot_wait");
        var time = new FakeTimeProvider();
        var slots = new StoreBatchSlots(1, time);
        slots.TryTake(() => { }, out _).Should().BeTrue();
        slots.TryTake(() => { }, out _).Should().BeFalse();
        time.Advance(TimeSpan.FromSeconds(1.5));
        slots.TryTake(() => { }, out _).Should().BeFalse();
        time.Advance(TimeSpan.FromSeconds(12.345));

        slots.Return();
        time.Advance(TimeSpan.FromSeconds(2));
        slots.Return();

        waits.GetMeasurementSnapshot().Select(m => m.Value).Where(v => v > 10)
            .Should().Equal([13.845, 14.345], "each place waited from its joining to its grant");
    }
}
