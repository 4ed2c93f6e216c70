namespace Allocator.Storage.Conformance;

/// <summary>
/// The behaviour every <see cref="IWorkerStore"/> must show. Each store's test project has one
/// small subclass that says how to make a fresh store and how to imitate another transaction.
/// </summary>
public abstract partial class WorkerStoreConformanceTests : IAsyncLifetime
{
    /// <summary>The store under test: fresh and empty for each test class instance (own schema).</summary>
    protected IWorkerStore Store { get; private set; } = null!;

    /// <summary>Creates a fresh, empty store (for a database: its own schema, migrated).</summary>
    protected abstract Task<IWorkerStore> CreateStoreAsync();

    /// <summary>The pool change feed of <see cref="Store"/> (stores implement it on the same class).</summary>
    protected abstract IPoolChangeFeed Changes { get; }

    /// <summary>
    /// Takes the row lock of one worker from outside the store, as a second database connection
    /// in an open transaction would (PostgreSQL: <c>SELECT … FOR UPDATE</c>), until disposed.
    /// </summary>
    protected abstract Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId);

    /// <summary>Makes an allocation's lease already expired, in the store's own clock.</summary>
    protected abstract Task ExpireLeaseAsync(string poolId, Guid allocationId);

    /// <summary>Releases resources of the store (schemas may be left behind in a throwaway cluster).</summary>
    protected virtual Task DisposeStoreAsync(IWorkerStore store) => Task.CompletedTask;

    public async Task InitializeAsync() => Store = await CreateStoreAsync();

    public async Task DisposeAsync() => await DisposeStoreAsync(Store);
}
