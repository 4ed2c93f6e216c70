using System.Collections.Concurrent;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Tests.Harness;

[Collection(TimingSensitive.Name)]
public sealed class ScenarioRunnerTests
{
    [Fact]
    public async Task Closed_CountLimit_RunsExactlyThatManyMeasuredSteps()
    {
        var scenario = new CountingScenario();

        var result = await Run(scenario, new ClosedModel(8), new RunLimits(500, TimeSpan.FromMinutes(1), TimeSpan.Zero));

        result.Steps.Should().Be(500);
        result.Allocations.Should().Be(500);
        result.Latency.Count.Should().Be(500);
        result.SortedLatenciesMs.Should().HaveCount(500);
        scenario.MeasuredSteps.Should().Be(500);
        scenario.Callers.Keys.Should().OnlyContain(caller => caller >= 0 && caller < 8);
        scenario.Cleaned.Should().BeTrue();
    }

    [Fact]
    public async Task Closed_FailingSteps_AreCountedByKind()
    {
        var scenario = new CountingScenario(iteration => iteration % 4 == 0 ? "odd-kind" : iteration % 4 == 1 ? throw new TimeoutException() : null);

        var result = await Run(scenario, new ClosedModel(1), new RunLimits(100, TimeSpan.FromMinutes(1), TimeSpan.Zero));

        result.Steps.Should().Be(100);
        result.FailedSteps.Should().Be(50);
        result.Allocations.Should().Be(50);
        result.ErrorsByKind.Should().BeEquivalentTo(new Dictionary<string, long> { ["odd-kind"] = 25, ["timeout"] = 25 });
        result.ErrorPercent.Should().Be(50);
    }

    [Fact]
    public async Task Closed_WarmUp_IsExcludedFromFigures()
    {
        var scenario = new CountingScenario(delay: TimeSpan.FromMilliseconds(5));

        var result = await Run(scenario, new ClosedModel(2), new RunLimits(20, TimeSpan.FromMinutes(1), TimeSpan.FromMilliseconds(300)));

        scenario.WarmUpSteps.Should().BePositive("steps ran during the warm-up");
        result.Steps.Should().Be(20, "warm-up steps are not counted");
        scenario.MeasuredSteps.Should().Be(20);
    }

    [Fact]
    public async Task Open_FixedRate_NeverStartsStepsFasterThanTheRate()
    {
        var scenario = new CountingScenario();
        var watch = System.Diagnostics.Stopwatch.StartNew();

        var result = await Run(scenario, new OpenModel(200, MaxInFlight: 16), new RunLimits(100, TimeSpan.FromMinutes(1), TimeSpan.Zero));

        // 100 steps at 200/s: the last one is scheduled at 0.495 s, whatever the machine's load.
        watch.Elapsed.Should().BeGreaterThan(TimeSpan.FromMilliseconds(480));
        result.Steps.Should().Be(100);
        scenario.Callers.Keys.Should().OnlyContain(slot => slot >= 0 && slot < 16);
    }

    [Fact]
    public async Task NotWired_IsReportedAsNotRun_WithTheMessage()
    {
        var scenario = new CountingScenario(_ => throw new ScenarioNotWiredException("not wired yet: needs X"));

        var result = await Run(scenario, new ClosedModel(4), new RunLimits(100, null, TimeSpan.Zero));

        result.Failure.Should().Be("not wired yet: needs X");
        scenario.Cleaned.Should().BeTrue();
    }

    [Fact]
    public void TimeTo10k_WhenNotReached_IsExtrapolatedAndLabelled()
    {
        var result = RunResult.Failed("w", "s", new ClosedModel(48), TimeSpan.FromMilliseconds(90), new RunLimits(1000, null, TimeSpan.Zero), "x") with
        {
            Failure = null,
            Allocations = 1_000,
            Elapsed = TimeSpan.FromSeconds(2),
        };

        result.Throughput.Should().Be(500);
        result.TimeTo10k.Should().Be((TimeSpan.FromSeconds(20), true));
        result.RttLimit.Should().BeApproximately(533.33, 0.01);
        result.PercentOfRttLimit.Should().BeApproximately(93.75, 0.01);
    }

    [Fact]
    public async Task Progress_WhileRunning_ShowsRateP50P99AndErrorsOfTheRun()
    {
        var snapshots = new ConcurrentQueue<ProgressSnapshot>();
        var runner = new ScenarioRunner(TimeProvider.System, TextWriter.Null) { ProgressInterval = TimeSpan.FromMilliseconds(50), Display = new RecordingDisplay(snapshots) };
        var scenario = new CountingScenario(iteration => iteration % 10 == 0 ? "odd-kind" : null, delay: TimeSpan.FromMilliseconds(2));
        var model = new ClosedModel(4);

        await runner.RunAsync(scenario, new ScenarioContext("test", 4, TimeSpan.Zero, TimeProvider.System, CancellationToken.None), model, new RunLimits(null, TimeSpan.FromMilliseconds(600), TimeSpan.Zero));

        snapshots.Should().NotBeEmpty();
        var answered = snapshots.Where(s => !double.IsNaN(s.P50Ms)).ToList();
        answered.Should().NotBeEmpty("steps answered in an interval give its p50 and p99");
        answered.Should().OnlyContain(s => s.P50Ms >= 2 && s.P99Ms >= s.P50Ms, "every step waits 2 ms");
        snapshots.Last().Errors.Should().BeGreaterThan(0, "every tenth step fails");
        snapshots.Last().ToString().Should().Contain("[test/counting]").And.Contain("/s, p50 ").And.Contain(" ms, p99 ").And.Contain("errors ");
    }

    [Fact]
    public async Task LiveDisplay_OnAConsole_DrawsATableOfTheLatestSnapshot()
    {
        using var writer = new StringWriter();
        var console = Spectre.Console.AnsiConsole.Create(new Spectre.Console.AnsiConsoleSettings
        {
            Out = new Spectre.Console.AnsiConsoleOutput(writer),
            Ansi = Spectre.Console.AnsiSupport.No,
            Interactive = Spectre.Console.InteractionSupport.Yes,
        });
        console.Profile.Width = 160;

        await new LiveProgressDisplay(console).ShowAsync(show =>
        {
            show(new ProgressSnapshot("storm-90/strict", 420, 1_000, 480.5, 95.25, 181.5, 3, TimeSpan.FromSeconds(7), WarmUp: false));
            return Task.CompletedTask;
        });

        writer.ToString().Should().Contain("req/s").And.Contain("storm-90/strict").And.Contain("420 / 1,000").And.Contain("95.3 ms").And.Contain("181.5 ms");
    }

    private sealed class RecordingDisplay(ConcurrentQueue<ProgressSnapshot> snapshots) : IProgressDisplay
    {
        public Task ShowAsync(Func<Action<ProgressSnapshot>, Task> report) => report(snapshots.Enqueue);
    }

    private static Task<RunResult> Run(IScenario scenario, LoadModel model, RunLimits limits) =>
        new ScenarioRunner(TimeProvider.System, TextWriter.Null).RunAsync(scenario, new ScenarioContext("test", model.Callers, TimeSpan.Zero, TimeProvider.System, CancellationToken.None), model, limits);

    private sealed class CountingScenario(Func<long, string?>? fail = null, TimeSpan delay = default) : IScenario
    {
        private long _measured;
        private long _warmUp;
        private long _iteration;

        public string Name => "counting";

        public ConcurrentDictionary<int, bool> Callers { get; } = new();

        public long MeasuredSteps => Interlocked.Read(ref _measured);

        public long WarmUpSteps => Interlocked.Read(ref _warmUp);

        public bool Cleaned { get; private set; }

        public Task InitAsync(ScenarioContext context) => Task.CompletedTask;

        public async Task<StepResult> StepAsync(StepInfo step, CancellationToken cancellationToken)
        {
            Callers[step.CallerIndex] = true;
            await Task.Yield();
            Interlocked.Increment(ref step.IsWarmUp ? ref _warmUp : ref _measured);
            if (delay > TimeSpan.Zero)
            {
                await Task.Delay(delay, cancellationToken);
            }

            var n = Interlocked.Increment(ref _iteration) - 1;
            return fail?.Invoke(n) is { } kind ? StepResult.Fail(kind) : StepResult.Ok();
        }

        public Task CleanAsync()
        {
            Cleaned = true;
            return Task.CompletedTask;
        }
    }
}
