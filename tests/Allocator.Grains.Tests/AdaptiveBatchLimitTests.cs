using Microsoft.Extensions.Time.Testing;
using Allocator.Grains.Tests.Support;

namespace Allocator.Grains.Tests;

public sealed class AdaptiveBatchLimitTests
{
    private static readonly TimeSpan Ms1 = TimeSpan.FromMilliseconds(1);

    [Fact]
    public void New_StartsAtTheMaximum()
    {
        var limit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: true);

        limit.Current.Should().Be(16);
        limit.MayStart(15, fullBatchWaiting: false).Should().BeTrue();
        limit.MayStart(16, fullBatchWaiting: false).Should().BeFalse();
    }

    [Fact]
    public void Record_BatchesQueuingInTheDatabase_LowersTheLimitToOne()
    {
        var time = new FakeTimeProvider();
        var limit = new AdaptiveBatchLimit(16, time, adaptive: true);

        // One quick batch, then batches ten times as long: they wait for one another.
        limit.Record(Ms1);
        for (var i = 0; i < 40; i++)
        {
            time.Advance(Ms1 * 10);
            limit.Record(Ms1 * 10);
        }

        limit.Current.Should().Be(1);
        limit.MayStart(0, fullBatchWaiting: false).Should().BeTrue("an idle pool always flushes at once");
        limit.MayStart(1, fullBatchWaiting: false).Should().BeFalse("requests gather into the next batch instead");
    }

    [Fact]
    public void Record_RoundTripDominatesAndVariesByAFewPercent_StaysAtTheMaximum()
    {
        var time = new FakeTimeProvider();
        var limit = new AdaptiveBatchLimit(16, time, adaptive: true);
        var random = new Random(7);

        // 90 ms of round trip plus up to 12 ms of statement, commit and jitter.
        for (var i = 0; i < 500; i++)
        {
            var ms = 90 + (random.NextDouble() * 12);
            time.Advance(TimeSpan.FromMilliseconds(ms / 16));
            limit.Record(TimeSpan.FromMilliseconds(ms));
            limit.Current.Should().Be(16, "batch {0} took {1:F1} ms against a quickest of {2:F1} ms", i, ms, limit.QuickestMs);
        }
    }

    [Fact]
    public void Record_QueueDrains_RaisesTheLimitBackToTheMaximum()
    {
        var time = new FakeTimeProvider();
        var limit = new AdaptiveBatchLimit(8, time, adaptive: true);
        limit.Record(Ms1);
        for (var i = 0; i < 20; i++)
        {
            limit.Record(Ms1 * 10);
        }

        limit.Current.Should().Be(1);

        for (var i = 0; i < 40; i++)
        {
            limit.Record(Ms1);
        }

        limit.Current.Should().Be(8);
    }

    [Fact]
    public void Record_DatabaseMovedFarther_ForgetsTheOldQuickestAndRecovers()
    {
        var time = new FakeTimeProvider();
        var limit = new AdaptiveBatchLimit(16, time, adaptive: true);
        limit.Record(Ms1);

        // From now on every batch takes 90 ms: a longer round trip, not queuing. Judged against
        // the 1 ms batch the limit falls; once that batch is out of the window it climbs back.
        var lowest = 16;
        for (var i = 0; i < 400; i++)
        {
            time.Advance(TimeSpan.FromMilliseconds(90));
            limit.Record(TimeSpan.FromMilliseconds(90));
            lowest = Math.Min(lowest, limit.Current);
        }

        lowest.Should().Be(1);
        limit.QuickestMs.Should().Be(90);
        limit.Current.Should().Be(16);
    }

    [Fact]
    public void MayStart_FullBatchWaiting_GoesBeyondTheLimitButNeverBeyondTheMaximum()
    {
        var limit = new AdaptiveBatchLimit(4, new FakeTimeProvider(), adaptive: true);
        limit.Record(Ms1);
        for (var i = 0; i < 10; i++)
        {
            limit.Record(Ms1 * 10);
        }

        limit.Current.Should().Be(1);
        limit.MayStart(1, fullBatchWaiting: false).Should().BeFalse();
        limit.MayStart(1, fullBatchWaiting: true).Should().BeTrue("waiting cannot make a full batch larger");
        limit.MayStart(3, fullBatchWaiting: true).Should().BeTrue();
        limit.MayStart(4, fullBatchWaiting: true).Should().BeFalse();
    }

    [Fact]
    public void Record_NotAdaptive_StaysAtTheMaximum()
    {
        var limit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: false);
        limit.Record(Ms1);
        for (var i = 0; i < 40; i++)
        {
            limit.Record(Ms1 * 10);
        }

        limit.Current.Should().Be(16);
    }

    [Fact]
    public void Record_ClockDidNotMove_ChangesNothing()
    {
        var limit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: true);

        limit.Record(TimeSpan.Zero);

        limit.Current.Should().Be(16);
        limit.SmoothedMs.Should().Be(double.NaN);
    }

    [Theory]
    [InlineData(90.0, 0.2)]   // far away: gather for the longest window, 200 µs, while batches are in flight
    [InlineData(6.4, 0.1)]    // a 64th of the quickest batch
    [InlineData(1.0, 0.0)]    // a local database: a gather would cost more than it saves
    public void GatherWindow_FollowsTheQuickestBatch(double quickestMs, double expectedMs)
    {
        var limit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: true);
        limit.Record(TimeSpan.FromMilliseconds(quickestMs));

        limit.GatherWindow.Should().Be(TimeSpan.FromMilliseconds(expectedMs));
    }

    [Theory]
    [InlineData(250.0, 7.8125)] // a 32nd of the quickest batch
    [InlineData(900.0, 10.0)]   // at most 10 ms
    [InlineData(90.0, 2.8125)]
    [InlineData(1.0, 0.0)]      // a local database: none
    public void LastSlotsGatherWindow_FollowsTheQuickestBatch(double quickestMs, double expectedMs)
    {
        var limit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: true);
        limit.Record(TimeSpan.FromMilliseconds(quickestMs));

        limit.LastSlotsGatherWindow.Should().Be(TimeSpan.FromMilliseconds(expectedMs));
    }

    [Fact]
    public void GatherWindows_NoneBeforeABatchWasTimed_OrWhenNotAdaptive()
    {
        var untimed = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: true);
        untimed.GatherWindow.Should().Be(TimeSpan.Zero);
        untimed.LastSlotsGatherWindow.Should().Be(TimeSpan.Zero);

        var fixedLimit = new AdaptiveBatchLimit(16, new FakeTimeProvider(), adaptive: false);
        fixedLimit.Record(TimeSpan.FromMilliseconds(90));
        fixedLimit.GatherWindow.Should().Be(TimeSpan.Zero);
        fixedLimit.LastSlotsGatherWindow.Should().Be(TimeSpan.Zero);
    }
}
