namespace Allocator.Grains.Tests;

/// <summary>
/// The group-commit queue alone, its turns run by hand: who goes in which batch, and when.
/// </summary>
public sealed class GroupCommitQueueTests
{
    private readonly Queue<Action> _turns = new();
    private readonly List<(TimeSpan Delay, Action Action)> _delayed = [];
    private readonly List<(string[] Items, TaskCompletionSource<TimeSpan?> Done)> _batches = [];

    [Fact]
    public void IdleQueue_SendsALoneItemAtOnce_WithoutGathering()
    {
        var queue = NewQueue(new Limit(max: 4, gather: TimeSpan.FromMilliseconds(1)));

        queue.Enqueue("a");
        RunTurns();

        Batches().Should().Equal("a");
        _delayed.Should().BeEmpty("nothing is in flight: no one else's callers are coming back");
    }

    [Fact]
    public void AQuarterOfTheSlotsInFlight_NewItemsGatherForTheWindow_ThenGoTogether()
    {
        var queue = NewQueue(new Limit(max: 2, gather: TimeSpan.FromMilliseconds(1)));
        queue.Enqueue("a");
        RunTurns();

        queue.Enqueue("b");
        queue.Enqueue("c");
        RunTurns();

        Batches().Should().Equal("a");
        _delayed.Should().ContainSingle().Which.Delay.Should().Be(TimeSpan.FromMilliseconds(1));
        queue.Pending.Should().Be(2);

        _delayed[0].Action();

        Batches().Should().Equal("a", "b,c");
    }

    [Fact]
    public void FewerThanAQuarterOfTheSlotsInFlight_ItemsGoAtTheNextTurn_WithoutAWindow()
    {
        var queue = NewQueue(new Limit(max: 8, gather: TimeSpan.FromMilliseconds(1)));
        queue.Enqueue("a");
        RunTurns();

        queue.Enqueue("b");
        RunTurns();

        Batches().Should().Equal("a", "b");
        _delayed.Should().BeEmpty("1 of 8 slots busy: no need to save slots");

        queue.Enqueue("c");
        RunTurns();

        Batches().Should().Equal("a", "b");
        _delayed.Should().ContainSingle("2 of 8 slots busy: gather");
    }

    [Fact]
    public void BatchesInFlight_AFullBatch_GoesWithoutWaitingForTheWindow()
    {
        var queue = NewQueue(new Limit(max: 2, gather: TimeSpan.FromMilliseconds(1)), maxBatchSize: 2);
        queue.Enqueue("a");
        RunTurns();

        queue.Enqueue("b");
        queue.Enqueue("c");
        RunTurns();

        Batches().Should().Equal("a", "b,c");
    }

    [Fact]
    public void NoGatherWindow_ItemsGoAtTheNextTurn_AsManyBatchesAsTheLimitAllows()
    {
        var queue = NewQueue(new Limit(max: 2, gather: TimeSpan.Zero));
        queue.Enqueue("a");
        RunTurns();
        queue.Enqueue("b");
        RunTurns();
        queue.Enqueue("c");
        RunTurns();

        Batches().Should().Equal("a", "b");
        _delayed.Should().BeEmpty();

        _batches[0].Done.SetResult(TimeSpan.FromMilliseconds(1));

        Batches().Should().Equal("a", "b", "c");
    }

    [Fact]
    public void SharedStoreSlots_AQueueWithoutOne_KeepsGathering_AndSendsEverythingWhenOneComesBack()
    {
        var slots = new StoreBatchSlots(1);
        var first = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        var second = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        first.Enqueue("a");
        RunTurns();

        second.Enqueue("b");
        RunTurns();
        second.Enqueue("c");
        RunTurns();
        first.Enqueue("d");
        RunTurns();

        Batches().Should().Equal(["a"], "the one slot is in use: nothing else goes to the store");
        second.Pending.Should().Be(2);

        _batches[0].Done.SetResult(TimeSpan.FromMilliseconds(1));
        RunTurns();

        Batches().Should().Equal(["a", "b,c"], "the slot went to the queue first in line, which sent all it had gathered");
        first.Pending.Should().Be(1, "the first queue waits its turn behind the second");
        slots.Free.Should().Be(0);

        _batches[1].Done.SetResult(TimeSpan.FromMilliseconds(1));
        RunTurns();
        _batches[2].Done.SetResult(TimeSpan.FromMilliseconds(1));
        RunTurns();

        Batches().Should().Equal("a", "b,c", "d");
        slots.Free.Should().Be(1, "every slot is given back");
    }

    [Fact]
    public void SharedStoreSlots_OnlyTheLastSlotFree_NewItemsGatherForTheLongerWindow()
    {
        var slots = new StoreBatchSlots(4);
        var other = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        other.Enqueue("x");
        RunTurns();
        other.Enqueue("y");
        RunTurns();
        var queue = NewQueue(new Limit(max: 4, gather: TimeSpan.FromMilliseconds(1), lastSlots: TimeSpan.FromMilliseconds(8)), slots: slots);
        queue.Enqueue("a"); // idle: goes at once, taking the third of four slots
        RunTurns();

        queue.Enqueue("b");
        RunTurns();
        queue.Enqueue("c");
        RunTurns();

        Batches().Should().Equal("x", "y", "a");
        _delayed.Should().ContainSingle().Which.Delay.Should().Be(TimeSpan.FromMilliseconds(8), "the batch would take the last free slot");

        _delayed[0].Action();

        Batches().Should().Equal("x", "y", "a", "b,c");
        slots.Free.Should().Be(0);
    }

    [Fact]
    public void SharedStoreSlots_ManyFree_NewItemsGatherForTheUsualWindow()
    {
        var slots = new StoreBatchSlots(16);
        var queue = NewQueue(new Limit(max: 4, gather: TimeSpan.FromMilliseconds(1), lastSlots: TimeSpan.FromMilliseconds(8)), slots: slots);
        queue.Enqueue("a");
        RunTurns();

        queue.Enqueue("b");
        RunTurns();

        _delayed.Should().ContainSingle().Which.Delay.Should().Be(TimeSpan.FromMilliseconds(1), "15 of 16 slots are free");
    }

    [Fact]
    public void SharedStoreSlots_NoneFree_ItemsGatherInLine_NotForTheLongerWindow()
    {
        var slots = new StoreBatchSlots(1);
        var queue = NewQueue(new Limit(max: 4, gather: TimeSpan.FromMilliseconds(1), lastSlots: TimeSpan.FromMilliseconds(8)), slots: slots);
        queue.Enqueue("a");
        RunTurns();

        queue.Enqueue("b");
        RunTurns();

        _delayed.Should().ContainSingle().Which.Delay.Should().Be(TimeSpan.FromMilliseconds(1), "no slot is free: the batch waits in line for one whatever it gathers");
        _delayed[0].Action();
        slots.Waiting.Should().Be(1);
    }

    [Fact]
    public void SharedStoreSlots_AQueueThatStopsInLine_PassesItsSlotOn()
    {
        var slots = new StoreBatchSlots(1);
        var first = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        var stopping = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        var third = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        first.Enqueue("a");
        RunTurns();
        stopping.Enqueue("b");
        third.Enqueue("c");
        RunTurns();

        _batches[0].Done.SetResult(TimeSpan.FromMilliseconds(1)); // the slot is handed to "stopping"
        stopping.Stop().Should().Equal("b");
        RunTurns();

        Batches().Should().Equal("a", "c");
        _batches[1].Done.SetResult(TimeSpan.FromMilliseconds(1));
        RunTurns();
        slots.Free.Should().Be(1);
        slots.Waiting.Should().Be(0);
    }

    [Fact]
    public void SharedStoreSlots_ASlotHandedToAQueueNowAtItsOwnLimit_GoesOnToTheNextInLine()
    {
        var slots = new StoreBatchSlots(2);
        var shrinking = new Limit(max: 2, gather: TimeSpan.Zero);
        var first = NewQueue(shrinking, slots: slots);
        var other = NewQueue(new Limit(max: 4, gather: TimeSpan.Zero), slots: slots);
        first.Enqueue("a");
        other.Enqueue("b");
        RunTurns();
        first.Enqueue("c"); // in line: both slots are held
        RunTurns();
        other.Enqueue("d"); // in line behind it
        RunTurns();

        shrinking.Max = 1; // e.g. the pool now serializes registrations
        _batches[1].Done.SetResult(TimeSpan.FromMilliseconds(1)); // "b" ends: its slot is handed to "first"
        RunTurns();

        Batches().Should().Equal(["a", "b", "d"], "\"first\" may not start a second batch now: the slot it was handed served \"d\"");
        first.Pending.Should().Be(1);
        _batches[0].Done.SetResult(TimeSpan.FromMilliseconds(1));
        RunTurns();
        Batches().Should().Equal("a", "b", "d", "c");
    }

    private GroupCommitQueue<string> NewQueue(IBatchLimit limit, int maxBatchSize = 8, StoreBatchSlots? slots = null) => new(
        maxBatchSize,
        limit,
        _turns.Enqueue,
        batch =>
        {
            var done = new TaskCompletionSource<TimeSpan?>();
            _batches.Add((batch, done));
            return done.Task;
        },
        scheduleAfter: (delay, action) => _delayed.Add((delay, action)),
        slots: slots);

    private void RunTurns()
    {
        while (_turns.TryDequeue(out var turn))
        {
            turn();
        }
    }

    private string[] Batches() => [.. _batches.Select(b => string.Join(",", b.Items))];

    private sealed class Limit(int max, TimeSpan gather, TimeSpan lastSlots = default) : IBatchLimit
    {
        public int Max { get; set; } = max;

        public int Current => Max;

        public TimeSpan GatherWindow => gather;

        public TimeSpan LastSlotsGatherWindow => lastSlots;

        public bool MayStart(int inFlight, bool fullBatchWaiting) => inFlight < Max;

        public void Record(TimeSpan storeTime)
        {
        }
    }
}
