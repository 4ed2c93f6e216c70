using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Integration;
using Allocator.LoadTests.Scenarios;

namespace Allocator.LoadTests.Smoke;

/// <summary>
/// A tiny storm for the test suite: 8 callers, 200 allocations, RTT 10 ms (through the latency
/// proxy for PostgreSQL, emulated for the in-memory store), then the invariant audit. Makes no
/// timing claims; the caller asserts on <see cref="RunResult.Audit"/> and the counts.
/// </summary>
internal static class SmokeStorm
{
    public const int Callers = 8;
    public const int Allocations = 200;
    public static readonly TimeSpan Rtt = TimeSpan.FromMilliseconds(10);

    /// <summary>Runs the smoke storm on PostgreSQL with the given store factory (e.g. from a PostgreSQL test).</summary>
    public static Task<RunResult> RunPostgresAsync(string connectionString, Func<PostgresStoreTarget, Task<IWorkerStore>> storeFactory, CancellationToken cancellationToken = default) =>
        RunAsync(new PostgresStoreProvider(connectionString, storeFactory), cancellationToken: cancellationToken);

    /// <summary>Runs the smoke storm on any store provider (e.g. <see cref="MemoryStoreProvider"/>).</summary>
    /// <param name="runId">The run's id (its PostgreSQL schema is <c>lt_&lt;run id&gt;</c>); null: a new one.</param>
    public static async Task<RunResult> RunAsync(StoreProvider stores, string? runId = null, CancellationToken cancellationToken = default)
    {
        var scenario = new AllocationScenario(
            "smoke: skip-locked unbatched",
            stores,
            DriverKind.Store,
            new PoolShape(Workers: 10, Capacity: 50, AllocationStrategy.SkipLocked),
            StepKind.Allocate);
        var runner = new ScenarioRunner(TimeProvider.System, TextWriter.Null);
        var context = new ScenarioContext("smoke", Callers, Rtt, TimeProvider.System, cancellationToken);
        if (runId is not null)
        {
            context = context with { RunId = runId };
        }

        return await runner.RunAsync(scenario, context, new ClosedModel(Callers), new RunLimits(Allocations, TimeSpan.FromMinutes(2), TimeSpan.Zero));
    }
}
