namespace Allocator.Storage.Conformance;

/// <summary>One active allocation per session key per pool, under any concurrency.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_50ConcurrentRequestsWithOneSessionKey_GiveOneAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 100);
        var key = NewSessionKey();

        var outcomes = await RunTogetherAsync(50, _ => AllocateOneAsync(poolId, Request(units: 3, sessionKey: key)));

        outcomes.Should().OnlyContain(o => o.Allocation != null, "every caller gets the session's allocation back");
        outcomes.Count(o => o.Status == AllocationStatus.Allocated).Should().Be(1, "a session key gets exactly one allocation");
        outcomes.Count(o => o.Status == AllocationStatus.Existing).Should().Be(49);
        outcomes.Select(o => o.Allocation!.AllocationId).Distinct().Should().ContainSingle("all outcomes carry the same allocation");
        outcomes.Select(o => o.Allocation!.WorkerId).Distinct().Should().ContainSingle();

        var allocation = outcomes.Single(o => o.Status == AllocationStatus.Allocated).Allocation!;
        await AssertLoadsMatchAsync(poolId, [allocation]);
        (await Store.GetPoolStatisticsAsync(poolId)).Load.Should().Be(3, "the units are taken once");
    }

    [Fact]
    public async Task Allocate_RetryAfterSuccess_ReturnsExistingUnchanged()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId, units: 2, lease: TimeSpan.FromMinutes(5));

        var retry = await AllocateOneAsync(poolId, Request(units: 2, lease: TimeSpan.FromMinutes(5), sessionKey: first.SessionKey));

        retry.Status.Should().Be(AllocationStatus.Existing);
        retry.Allocation.Should().BeEquivalentTo(first, "a retry returns the same allocation unchanged");
        await AssertLoadsMatchAsync(poolId, [first]);
    }

    [Fact]
    public async Task Allocate_RetryWithDifferentUnits_StillReturnsTheExistingAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId, units: 1);

        var retry = await AllocateOneAsync(poolId, Request(units: 4, sessionKey: first.SessionKey));

        retry.Status.Should().Be(AllocationStatus.Existing);
        retry.Allocation!.AllocationId.Should().Be(first.AllocationId);
        retry.Allocation.Units.Should().Be(1);
        await AssertLoadsMatchAsync(poolId, [first]);
    }

    [Fact]
    public async Task Allocate_SessionKeyAfterRelease_GetsANewAllocation()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 10);
        var first = await AllocateAsync(poolId);
        (await Store.ReleaseAsync(poolId, first.AllocationId, first.Epoch)).Status.Should().Be(LeaseStatus.Ok);

        var second = await AllocateOneAsync(poolId, Request(sessionKey: first.SessionKey));

        second.Status.Should().Be(AllocationStatus.Allocated, "the key has no active allocation any more");
        second.Allocation!.AllocationId.Should().NotBe(first.AllocationId);
        await AssertLoadsMatchAsync(poolId, [second.Allocation]);
    }

    [Fact]
    public async Task Allocate_SameSessionKeyInTwoPools_IndependentAllocations()
    {
        var poolA = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var poolB = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var key = NewSessionKey();

        var inA = await AllocateAsync(poolA, sessionKey: key);
        var inB = await AllocateAsync(poolB, sessionKey: key);

        inB.AllocationId.Should().NotBe(inA.AllocationId, "idempotency is per pool");
        await AssertLoadsMatchAsync(poolA, [inA]);
        await AssertLoadsMatchAsync(poolB, [inB]);
    }
}
