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

    private GroupCommitQueue<string> NewQueue(IBatchLimit limit, int maxBatchSize = 8) => new(
        maxBatchSize,
        limit,
        _turns.Enqueue,
        batch =>
        {
            var done = new TaskCompletionSource<TimeSpan?>();
            _batches.Add((batch, done));
            return done.Task;
        },
        scheduleAfter: (delay, action) => _delayed.Add((delay, action)));

    private void RunTurns()
    {
        while (_turns.TryDequeue(out var turn))
        {
            turn();
        }
    }

    private string[] Batches() => [.. _batches.Select(b => string.Join(",", b.Items))];

    private sealed class Limit(int max, TimeSpan gather) : IBatchLimit
    {
        public int Current => max;

        public TimeSpan GatherWindow => gather;

        public bool MayStart(int inFlight, bool fullBatchWaiting) => inFlight < max;

        public void Record(TimeSpan storeTime)
        {
        }
    }
}
