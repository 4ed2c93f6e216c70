namespace Allocator.Core.Tests;

public sealed class WorkerScoreTests
{
    [Fact]
    public void Compute_FullWorker_ScoresFull() =>
        WorkerScore.Compute(load: 10, capacity: 10, reportedLoadIndex: null).Should().Be(WorkerScore.Full);

    [Fact]
    public void Compute_ReportedIndexHigherThanLoad_UsesReportedIndex() =>
        WorkerScore.Compute(load: 1, capacity: 10, reportedLoadIndex: 5_000).Should().Be(WorkerScore.Full / 2);

    [Fact]
    public void Compute_LoadHigherThanReportedIndex_UsesLoad() =>
        WorkerScore.Compute(load: 9, capacity: 10, reportedLoadIndex: 100).Should().Be(WorkerScore.Full / 10 * 9);

    [Fact]
    public void Compute_LargestCapacity_EverySlotChangesTheScore()
    {
        // An integer 0–10000 score would give 100 slots of this worker one value.
        var scores = Enumerable.Range(0, 1_000)
            .Select(load => WorkerScore.Compute(load, AllocatorLimits.MaxCapacity, null))
            .ToList();

        scores.Should().OnlyHaveUniqueItems().And.BeInAscendingOrder();
    }

    [Fact]
    public void Compute_LargestLoad_DoesNotOverflow() =>
        WorkerScore.Compute(AllocatorLimits.MaxCapacity, AllocatorLimits.MaxCapacity, null).Should().Be(WorkerScore.Full);
}
