namespace Allocator.Grains.Tests;

/// <summary>The waiter queue alone: first come first served, deadlines, and when to wake.</summary>
public sealed class WaiterQueueTests
{
    private static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);

    [Fact]
    public void WakeGroup_TakesTheLongestWaitingFirst_UpToTheBatchSize()
    {
        var queue = new WaiterQueue<string>();
        queue.Park("late", arrival: 7, Start.AddSeconds(9));
        queue.Park("early", arrival: 2, Start.AddSeconds(9));
        queue.Park("middle", arrival: 5, Start.AddSeconds(9));
        queue.OnCapacityChanged();

        queue.TakeWakeGroup(max: 2).Should().Equal("early", "middle");

        queue.Count.Should().Be(1);
        queue.WokenOutstanding.Should().Be(2);
    }

    [Fact]
    public void AWaiterWokenAlone_EndsTheGroupBeforeIt_AndIsWokenByItself()
    {
        var queue = new WaiterQueue<string>();
        queue.Park("a", 1, Start.AddSeconds(9));
        queue.Park("b", 2, Start.AddSeconds(9));
        queue.Park("claimed", 3, Start.AddSeconds(9));
        queue.Park("c", 4, Start.AddSeconds(9));
        static bool Alone(string w) => w == "claimed";
        queue.OnCapacityChanged();

        queue.TakeWakeGroup(max: 10, Alone).Should().Equal("a", "b");
        queue.WokenReturned("a", stillNoCapacity: false);
        queue.WokenReturned("b", stillNoCapacity: false);
        queue.TakeWakeGroup(max: 10, Alone).Should().Equal(["claimed"], "a caller woken alone goes by itself, then the next group");
        queue.WokenReturned("claimed", stillNoCapacity: false);
        queue.TakeWakeGroup(max: 10, Alone).Should().Equal("c");
    }

    [Fact]
    public void WhileAGroupIsOut_NoOtherIsWoken()
    {
        var queue = new WaiterQueue<string>();
        queue.Park("a", 1, Start.AddSeconds(9));
        queue.Park("b", 2, Start.AddSeconds(9));
        queue.OnCapacityChanged();
        queue.TakeWakeGroup(max: 1).Should().Equal("a");

        queue.OnCapacityChanged();
        queue.TakeWakeGroup(max: 1).Should().BeEmpty("a's group has not come back yet");

        queue.WokenReturned("a", stillNoCapacity: false).Should().BeTrue();
        queue.TakeWakeGroup(max: 1).Should().Equal("b");
    }

    [Fact]
    public void AGroupThatFoundNoCapacity_StopsWakingUntilNewsOfAChange()
    {
        var queue = new WaiterQueue<string>();
        queue.Park("a", 1, Start.AddSeconds(9));
        queue.OnCapacityChanged();
        queue.TakeWakeGroup(max: 4).Should().Equal("a");
        queue.WokenReturned("a", stillNoCapacity: true);
        queue.Park("a", 1, Start.AddSeconds(9));

        queue.TakeWakeGroup(max: 4).Should().BeEmpty("a full pool must not spin");

        queue.RequestWake();
        queue.TakeWakeGroup(max: 4).Should().Equal(["a"], "the periodic re-check wakes anyway");
    }

    [Fact]
    public void TakeExpired_UnparksThoseAtOrPastTheirDeadline_OldestDeadlineFirst()
    {
        var queue = new WaiterQueue<string>();
        queue.Park("b", 1, Start.AddSeconds(2));
        queue.Park("a", 2, Start.AddSeconds(1));
        queue.Park("c", 3, Start.AddSeconds(5));
        queue.Remove("b").Should().BeTrue();

        queue.TakeExpired(Start.AddSeconds(2)).Should().Equal("a");

        queue.NextDeadline.Should().Be(Start.AddSeconds(5), "a removed caller's deadline is dropped when it surfaces");
        queue.TakeAll().Should().Equal("c");
        queue.NextDeadline.Should().BeNull();
    }

    [Fact]
    public void WokenReturned_ForACallerThatWasNotWoken_IsFalse()
    {
        var queue = new WaiterQueue<string>();
        queue.WokenReturned("stranger", stillNoCapacity: true).Should().BeFalse();
        queue.Park("a", 1, Start.AddSeconds(9));
        queue.TakeWakeGroup(max: 1).Should().Equal(["a"], "the first wake needs no news: nothing has failed yet");
    }
}
