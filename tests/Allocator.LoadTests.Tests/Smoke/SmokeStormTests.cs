using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scenarios;
using Allocator.LoadTests.Smoke;

namespace Allocator.LoadTests.Tests.Smoke;

/// <summary>
/// The smoke storm against the in-memory store: it completes and the invariant audit passes.
/// The PostgreSQL variant (<see cref="SmokeStorm.RunPostgresAsync"/>) is called from the
/// PostgreSQL tests once the store is wired. No timing assertions.
/// </summary>
public sealed class SmokeStormTests
{
    [Fact]
    public async Task SmokeStorm_InMemoryStore_AllocatesEverythingAndPassesTheAudit()
    {
        var result = await SmokeStorm.RunAsync(new MemoryStoreProvider(TimeProvider.System));

        result.Failure.Should().BeNull();
        result.Allocations.Should().Be(SmokeStorm.Allocations);
        result.FailedSteps.Should().Be(0);
        result.Audit.Should().NotBeNull();
        result.Audit!.Violations.Should().BeEmpty();
        result.Audit.Passed.Should().BeTrue();
        result.Metric(MetricNames.LoadSpread).Should().NotBeNull();
    }
}

/// <summary>
/// The smoke storm through the latency proxy against the real PostgreSQL store: every
/// allocation succeeds and the SQL invariant audit passes. No timing assertions.
/// </summary>
public sealed class PostgresSmokeStormTests
{
    [Fact]
    public async Task SmokeStorm_PostgresThroughProxy_AllocatesEverythingAndPassesTheSqlAudit()
    {
        var connectionString = Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES");
        connectionString.Should().NotBeNullOrEmpty("ALLOCATOR_POSTGRES must hold a PostgreSQL connection string (eng/test.sh starts one)");

        var result = await SmokeStorm.RunPostgresAsync(connectionString!, Integration.IntegrationHooks.RequirePostgresStore());

        result.Failure.Should().BeNull();
        result.Allocations.Should().Be(SmokeStorm.Allocations);
        result.FailedSteps.Should().Be(0);
        result.Audit.Should().NotBeNull();
        result.Audit!.Violations.Should().BeEmpty();
        result.Audit.Passed.Should().BeTrue();
    }
}
