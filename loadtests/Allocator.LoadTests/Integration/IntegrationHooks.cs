using Allocator.Storage.PostgreSql;
using Allocator.Storage.PostgreSql.Internal;

namespace Allocator.LoadTests.Integration;

/// <summary>
/// The one place where the drivers that live in other projects are plugged in. Each hook is
/// null until the integrator fills it; a scenario that needs an empty hook stops with a
/// "not wired yet" message instead of faking results.
/// </summary>
/// <remarks>
/// To wire the PostgreSQL store, set <see cref="PostgresStore"/> in the static constructor below,
/// e.g. <c>PostgresStore = async target => await PostgresWorkerStore.CreateAsync(new() { ConnectionString = target.ConnectionString, Schema = target.Schema })</c>
/// (creating and migrating the schema). The connection string already points at the latency
/// proxy when an RTT is injected, and already carries <c>Maximum Pool Size</c> and
/// <c>Multiplexing</c>. Tests may set the hooks themselves.
/// </remarks>
internal static class IntegrationHooks
{
    static IntegrationHooks()
    {
        PostgresStore = async target => await PostgresWorkerStore.CreateAsync(
            new PostgresWorkerStoreOptions { ConnectionString = target.ConnectionString, Schema = target.Schema });
        PoolGrainDriver = Integration.PoolGrainDriver.StartAsync;
        HttpDriver = Integration.HttpDriver.StartAsync;
    }

    /// <summary>
    /// Creates a migrated PostgreSQL store in its own, new schema. A store that implements
    /// <see cref="IAsyncDisposable"/> or <see cref="IDisposable"/> is disposed after the run.
    /// </summary>
    public static Func<PostgresStoreTarget, Task<IWorkerStore>>? PostgresStore { get; set; }

    /// <summary>
    /// Makes a driver that allocates through the pool grain (group commit) over the given store.
    /// Needs <c>Allocator.Grains</c>.
    /// </summary>
    public static Func<IWorkerStore, Task<IAllocationDriver>>? PoolGrainDriver { get; set; }

    /// <summary>
    /// Starts the HTTP host over the given store and returns a driver that calls it through
    /// <c>Allocator.Client</c>. Needs <c>Allocator.Host</c> and <c>Allocator.Client</c>.
    /// </summary>
    public static Func<IWorkerStore, CancellationToken, Task<IAllocationDriver>>? HttpDriver { get; set; }

    public static Func<PostgresStoreTarget, Task<IWorkerStore>> RequirePostgresStore() =>
        PostgresStore ?? throw new Harness.ScenarioNotWiredException(
            "not wired yet: needs the PostgreSQL store factory (IntegrationHooks.PostgresStore, from Allocator.Storage.PostgreSql)");

    public static Func<IWorkerStore, Task<IAllocationDriver>> RequirePoolGrainDriver() =>
        PoolGrainDriver ?? throw new Harness.ScenarioNotWiredException(
            "not wired yet: needs the pool grain (IntegrationHooks.PoolGrainDriver, from Allocator.Grains)");
}

/// <summary>The pool change feed of a store the harness holds as an <see cref="IWorkerStore"/> (every store here implements both).</summary>
internal static class ChangeFeed
{
    public static IPoolChangeFeed Of(IWorkerStore store) =>
        store as IPoolChangeFeed ?? throw new InvalidOperationException($"The {store.Name} store does not implement IPoolChangeFeed.");
}

/// <summary>Where a PostgreSQL store for one run lives.</summary>
/// <param name="ConnectionString">Through the latency proxy when an RTT is injected; carries the pool size and multiplexing settings.</param>
/// <param name="Schema">A fresh schema for this run (the factory creates and migrates it).</param>
internal sealed record PostgresStoreTarget(string ConnectionString, string Schema, int MaxConnections, bool Multiplexing);

/// <summary>
/// How a scenario allocates and releases: directly on the store, through the pool grain, or over
/// HTTP through the typed client. Must be safe for concurrent use.
/// </summary>
internal interface IAllocationDriver : IAsyncDisposable
{
    /// <summary>Short label for reports, e.g. <c>store</c>, <c>pool grain</c>, <c>http</c>.</summary>
    string Name { get; }

    Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken);

    Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken);

    /// <summary>Registers one worker the way this strategy's service would (reg-storm).</summary>
    Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken);
}

/// <summary>Allocates one request per call straight on the store: one statement per allocation (unbatched).</summary>
internal sealed class StoreDriver(IWorkerStore store) : IAllocationDriver
{
    public string Name => "store";

    public async Task<AllocationOutcome> AllocateAsync(string poolId, AllocationRequest request, CancellationToken cancellationToken) =>
        (await store.AllocateAsync(poolId, [request], cancellationToken))[0];

    public Task<LeaseResult> ReleaseAsync(string poolId, Guid allocationId, long epoch, CancellationToken cancellationToken) =>
        store.ReleaseAsync(poolId, allocationId, epoch, cancellationToken);

    public Task RegisterAsync(string poolId, WorkerRegistration registration, CancellationToken cancellationToken) =>
        store.RegisterWorkersAsync(poolId, [registration], cancellationToken);

    public ValueTask DisposeAsync() => ValueTask.CompletedTask;
}
