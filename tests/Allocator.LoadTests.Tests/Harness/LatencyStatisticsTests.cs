using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Tests.Harness;

public sealed class LatencyStatisticsTests
{
    [Fact]
    public void FromSorted_OneToHundred_GivesExactNearestRankPercentiles()
    {
        var values = Enumerable.Range(1, 100).Select(i => (double)i).ToArray();

        var stats = LatencyStatistics.FromSorted(values);

        stats.Count.Should().Be(100);
        stats.MeanMs.Should().BeApproximately(50.5, 1e-9);
        stats.P50Ms.Should().Be(50);
        stats.P95Ms.Should().Be(95);
        stats.P99Ms.Should().Be(99);
        stats.MaxMs.Should().Be(100);
        stats.MinMs.Should().Be(1);
        stats.StdevMs.Should().BeApproximately(Math.Sqrt(((100.0 * 100) - 1) / 12), 1e-9);
        stats.Cv.Should().BeApproximately(stats.StdevMs / 50.5, 1e-12);
    }

    [Fact]
    public void FromSorted_Empty_IsAllZero()
    {
        var stats = LatencyStatistics.FromSorted([]);

        stats.Count.Should().Be(0);
        stats.Cv.Should().Be(0);
    }

    [Fact]
    public void MergeToSortedMs_SeveralCallers_MergesEveryRecordingInOrder()
    {
        var frequency = System.Diagnostics.Stopwatch.Frequency;
        List<long> a = [3 * frequency / 1000, 1 * frequency / 1000];
        List<long> b = [2 * frequency / 1000];

        var merged = LatencyStatistics.MergeToSortedMs([a, b]);

        merged.Should().HaveCount(3).And.BeInAscendingOrder();
        merged[0].Should().BeApproximately(1, 0.01);
        merged[2].Should().BeApproximately(3, 0.01);
    }
}
