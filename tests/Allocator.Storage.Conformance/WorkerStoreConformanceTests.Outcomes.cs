using System.Collections.Concurrent;

namespace Allocator.Storage.Conformance;

/// <summary>How a batch's outcomes reach the caller (issue 12: onCommitted, request deadlines).</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_OnCommitted_ReportsEveryRequestOnce_WithTheOutcomeItReturns()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 2);
        var replayed = await AllocateAsync(poolId);
        var reports = new ConcurrentQueue<(int Index, AllocationOutcome Outcome)>();

        var outcomes = await Store.AllocateAsync(poolId,
            [Request(), Request(sessionKey: replayed.SessionKey), Request(units: 3), Request()],
            (index, outcome) => reports.Enqueue((index, outcome)),
            CancellationToken.None);

        outcomes.Select(o => o.Status).Should().Equal(AllocationStatus.Allocated, AllocationStatus.Existing, AllocationStatus.NoCapacity, AllocationStatus.Allocated);
        reports.Select(r => r.Index).Should().BeEquivalentTo([0, 1, 2, 3], "each request is reported exactly once");
        foreach (var (index, outcome) in reports)
        {
            outcome.Should().Be(outcomes[index], "request {0} is reported with the outcome the call returns", index);
        }
    }

    [Fact]
    public async Task Allocate_RequestPastItsDeadline_EveryRowWithRoomLocked_IsUnavailableAtOnce_NothingWritten()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var request = Request() with { Deadline = TimeProvider.System.GetUtcNow() - TimeSpan.FromSeconds(1) };

        AllocationOutcome outcome;
        await using (await HoldRowLockAsync(poolId, WorkerId(0)))
        await using (await HoldRowLockAsync(poolId, WorkerId(1)))
        {
            // Without the deadline this would retry and then wait in the blocking fallback.
            outcome = await WithinAsync(AllocateOneAsync(poolId, request), NoWaitBound,
                "an allocation past its deadline to answer without a retry or a blocking fallback");
        }

        outcome.Status.Should().Be(AllocationStatus.Unavailable, "its caller has given up: no retry and no fallback start for it");
        outcome.OutcomeUnknown.Should().BeFalse("nothing was written for it");
        (await LoadsAsync(poolId)).Values.Should().OnlyContain(load => load == 0);
        (await AllocateOneAsync(poolId, request with { Deadline = null })).Status.Should().Be(AllocationStatus.Allocated, "the key has no allocation yet");
    }
}
