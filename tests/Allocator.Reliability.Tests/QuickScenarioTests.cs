using Allocator.Reliability.Cluster;
using Allocator.Reliability.Scenarios;
using Allocator.Testing;
using Xunit.Abstractions;

namespace Allocator.Reliability.Tests;

/// <summary>The clusters the quick scenarios share (started on first use, one kind at a time).</summary>
public sealed class ScenarioEnvironments : IAsyncLifetime
{
    internal Environments Environments { get; private set; } = null!;

    public Task InitializeAsync()
    {
        var connectionString = Environment.GetEnvironmentVariable("ALLOCATOR_POSTGRES") is { Length: > 0 } value
            ? value
            : throw new InvalidOperationException("ALLOCATOR_POSTGRES is not set: start PostgreSQL with eng/postgres.sh (eng/test.sh does).");
        Environments = new Environments(connectionString, Path.Combine(Repository.Root, "artifacts", "faults-ci"));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync() => await Environments.DisposeAsync();
}

[CollectionDefinition(Name)]
public sealed class ScenarioCollection : ICollectionFixture<ScenarioEnvironments>
{
    public const string Name = "fault scenarios";
}

/// <summary>
/// The quick variant of every fault scenario meant for CI (eng/faults.sh runs the full ones, and
/// busy-cores, a measurement left out of CI): real host processes on PostgreSQL, faults
/// injected, then the checker reads the database. Any violation of any invariant fails the
/// scenario; its report (faults, figures, verdict per invariant, the history file) is the
/// test's output.
/// </summary>
[Collection(ScenarioCollection.Name)]
public sealed class QuickScenarioTests(ScenarioEnvironments environments, ITestOutputHelper output)
{
    public static TheoryData<string> Names() => [.. ScenarioCatalogue.All.Where(s => s.InContinuousIntegration).Select(s => s.Name)];

    [Theory]
    [MemberData(nameof(Names))]
    public async Task Scenario_Quick_NoInvariantViolated(string name)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromMinutes(3));
        var report = await ScenarioRunner.RunAsync(ScenarioCatalogue.Get(name), environments.Environments, quick: true, timeout.Token);
        output.WriteLine(report.ToText());

        report.Check.Allocations.Should().BeGreaterThan(0, "the scenario must have allocated something to check");
        report.Violations.Should().Be(0, report.ToText());
    }
}
