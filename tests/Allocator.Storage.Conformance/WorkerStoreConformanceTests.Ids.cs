namespace Allocator.Storage.Conformance;

/// <summary>Allocation ids: unique, time-ordered (UUID version 7) in every store.</summary>
public abstract partial class WorkerStoreConformanceTests
{
    [Fact]
    public async Task Allocate_SequentialBatches_GiveVersion7IdsInTimeOrder()
    {
        var poolId = await CreatePoolWithWorkersAsync(workers: 4, capacity: 100);
        List<Guid> ids = [];
        for (var batch = 0; batch < 3; batch++)
        {
            var outcomes = await Store.AllocateAsync(poolId, [.. Enumerable.Range(0, 4).Select(_ => Request(units: 1))]);
            ids.AddRange(outcomes.Select(o => o.Allocation!.AllocationId));
        }

        ids.Should().OnlyHaveUniqueItems();
        ids.Should().OnlyContain(id => id.Version == 7, "time-ordered ids keep index inserts at one end of the primary key");
        var milliseconds = ids.Select(UnixMilliseconds).ToList();
        milliseconds.Should().BeInAscendingOrder("a later allocation never carries an earlier time");
    }

    private static long UnixMilliseconds(Guid id)
    {
        var bytes = id.ToByteArray(bigEndian: true);
        long ms = 0;
        for (var i = 0; i < 6; i++)
        {
            ms = (ms << 8) | bytes[i];
        }

        return ms;
    }
}
