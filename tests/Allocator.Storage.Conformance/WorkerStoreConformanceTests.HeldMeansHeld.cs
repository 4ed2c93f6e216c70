namespace Allocator.Storage.Conformance;

/// <summary>Issue 20: the ways a broker could lose a slot it was given, or a worker its fencing, that every store must not have.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_FallbackLease_AppliesOnlyWhenNeitherTheRequestNorThePoolNamesALease()
    {
        // Issue 20, #2: the pool's default lease is the store's to apply, with the settings it
        // reads as it allocates; the caller's fallback comes after it, never instead of it.
        var noDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5);
        var withDefault = await CreatePoolWithWorkersAsync(workers: 1, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });
        var fallback = TimeSpan.FromHours(24);

        var poolDefault = await AllocateOneAsync(withDefault, Request() with { FallbackLease = fallback });
        var fellBack = await AllocateOneAsync(noDefault, Request() with { FallbackLease = fallback });
        var own = await AllocateOneAsync(withDefault, Request(lease: TimeSpan.FromMinutes(3)) with { FallbackLease = fallback });

        ExpiryOf(poolDefault).Should().BeCloseTo(TimeSpan.FromMinutes(1), TimeSpan.FromSeconds(5), "the pool's default lease comes before the fallback");
        ExpiryOf(fellBack).Should().BeCloseTo(fallback, TimeSpan.FromSeconds(5), "neither the request nor the pool names a lease");
        ExpiryOf(own).Should().BeCloseTo(TimeSpan.FromMinutes(3), TimeSpan.FromSeconds(5), "the request's own lease comes first");
    }

    [Fact]
    public async Task Allocate_FallbackLease_AlsoOnTheBatchAndBlockingPaths()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1), Strategy = AllocationStrategy.Strict });
        var strict = await AllocateOneAsync(poolId, Request() with { FallbackLease = TimeSpan.FromHours(24) });
        var batchPool = await CreatePoolWithWorkersAsync(workers: 2, capacity: 5, new PoolSettings { DefaultLease = TimeSpan.FromMinutes(1) });

        var batch = await Store.AllocateAsync(batchPool, [.. Enumerable.Range(0, 4).Select(_ => Request() with { FallbackLease = TimeSpan.FromHours(24) })]);

        ExpiryOf(strict).Should().BeCloseTo(TimeSpan.FromMinutes(1), TimeSpan.FromSeconds(5));
        batch.Should().OnlyContain(o => o.Status == AllocationStatus.Allocated);
        batch.Select(ExpiryOf).Should().OnlyContain(e => e > TimeSpan.FromSeconds(55) && e < TimeSpan.FromSeconds(65), "every request of a set batch takes the pool's default");
    }

    private static TimeSpan ExpiryOf(AllocationOutcome outcome)
    {
        outcome.Status.Should().Be(AllocationStatus.Allocated);
        var allocation = outcome.Allocation!;
        allocation.ExpiresAt.Should().NotBeNull();
        return allocation.ExpiresAt!.Value - allocation.CreatedAt;
    }
}
