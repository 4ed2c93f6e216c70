using Allocator.Storage.InMemory;
using Allocator.Storage.Conformance;

namespace Allocator.Storage.InMemory.Tests;

/// <summary>The conformance suite against the in-memory reference store.</summary>
public sealed class InMemoryConformanceTests : WorkerStoreConformanceTests
{
    private InMemoryWorkerStore Memory => (InMemoryWorkerStore)Store;

    protected override IPoolChangeFeed Changes => Memory;

    protected override Task<IWorkerStore> CreateStoreAsync() =>
        Task.FromResult<IWorkerStore>(new InMemoryWorkerStore(TimeProvider.System, new InMemoryWorkerStoreOptions { LockTimeout = TimeSpan.FromSeconds(5) }));

    protected override Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId) =>
        Memory.HoldRowLockAsync(poolId, workerId);

    protected override Task ExpireLeaseAsync(string poolId, Guid allocationId)
    {
        Memory.ExpireLease(poolId, allocationId);
        return Task.CompletedTask;
    }
}
