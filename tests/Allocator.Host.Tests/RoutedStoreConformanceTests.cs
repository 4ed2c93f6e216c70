using Allocator.Host.Storage;
using Allocator.Storage.Conformance;
using Allocator.Storage.InMemory;

namespace Allocator.Host.Tests;

/// <summary>
/// The whole store conformance suite through the routing store of a host with several databases
/// (issue 23), over two in-memory reference stores: new pools alternate between them (the
/// fewest-pools rule), so every behaviour is checked on pools of either database, reached
/// through the directory.
/// </summary>
public sealed class RoutedStoreConformanceTests : WorkerStoreConformanceTests
{
    private readonly InMemoryWorkerStore _a = new(TimeProvider.System, new InMemoryWorkerStoreOptions { LockTimeout = TimeSpan.FromSeconds(5) });
    private readonly InMemoryWorkerStore _b = new(TimeProvider.System, new InMemoryWorkerStoreOptions { LockTimeout = TimeSpan.FromSeconds(5) });
    private RoutingWorkerStore? _routing;

    protected override IPoolChangeFeed Changes => _routing!;

    protected override Task<IWorkerStore> CreateStoreAsync()
    {
        var databases = new Databases([Of("a", _a, isDefault: true), Of("b", _b, isDefault: false)]);
        _routing = new RoutingWorkerStore(databases);
        return Task.FromResult<IWorkerStore>(_routing);
    }

    protected override async Task<IAsyncDisposable> HoldRowLockAsync(string poolId, string workerId) =>
        await StoreOf(poolId).HoldRowLockAsync(poolId, workerId);

    protected override Task ExpireLeaseAsync(string poolId, Guid allocationId)
    {
        StoreOf(poolId).ExpireLease(poolId, allocationId);
        return Task.CompletedTask;
    }

    protected override Task DisposeStoreAsync(IWorkerStore store)
    {
        _routing?.Dispose();
        return Task.CompletedTask;
    }

    [Theory]
    [InlineData(16, 100, 16)]
    [InlineData(100, 40, 40)]
    [InlineData(100, null, null)]
    public void ConnectionLimit_OfSeveralDatabases_IsTheSmallest_OrNoneWhenOneDoesNotSay(int? first, int? second, int? expected)
    {
        using var routing = new RoutingWorkerStore(new Databases([
            new Database("a", true, new StoreFaultTests.FaultyStore(_a) { ConnectionLimit = first }, _a, _a, _a),
            new Database("b", false, new StoreFaultTests.FaultyStore(_b) { ConnectionLimit = second }, _b, _b, _b)]));

        ((IWorkerStore)routing).ConnectionLimit.Should().Be(expected, "the silo's store slots must fit the smallest pool: its load may all be on that database");
    }

    private InMemoryWorkerStore StoreOf(string poolId) => _routing!.KnownDatabaseOf(poolId) switch
    {
        "a" => _a,
        "b" => _b,
        var other => throw new InvalidOperationException($"Pool '{poolId}' has no cached route ({other ?? "none"}): the test used it through the store first."),
    };

    private static Database Of(string name, InMemoryWorkerStore store, bool isDefault) => new(name, isDefault, store, store, store, store);
}
