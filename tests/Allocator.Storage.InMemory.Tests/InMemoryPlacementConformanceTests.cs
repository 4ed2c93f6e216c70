using Allocator.Storage.Conformance;

namespace Allocator.Storage.InMemory.Tests;

/// <summary>The pool directory and pool removal (issue 23) on the in-memory reference store.</summary>
public sealed class InMemoryPlacementConformanceTests : PoolPlacementConformanceTests
{
    protected override IPoolChangeFeed Changes => (InMemoryWorkerStore)Store;

    protected override Task<IWorkerStore> CreateStoreAsync() => Task.FromResult<IWorkerStore>(new InMemoryWorkerStore());
}
