namespace Allocator.LoadTests.Harness;

/// <summary>
/// One named scenario, NBomber's model: set up once, then many concurrent callers each call
/// <see cref="StepAsync"/> in a loop; the harness times every step. Scenarios know nothing about
/// load models, timing or reports.
/// </summary>
internal interface IScenario
{
    /// <summary>Short, stable name (the strategy label in reports), e.g. <c>skip-locked batched</c>.</summary>
    string Name { get; }

    /// <summary>Provisions what the scenario needs (proxy, pool, workers). Not timed.</summary>
    Task InitAsync(ScenarioContext context);

    /// <summary>
    /// One unit of work. Exceptions are counted as errors by type. A warm-up step should leave
    /// nothing behind (e.g. release what it allocated) so the measured phase starts clean.
    /// </summary>
    Task<StepResult> StepAsync(StepInfo step, CancellationToken cancellationToken);

    /// <summary>Tears down what <see cref="InitAsync"/> made. Runs even when the run failed.</summary>
    Task CleanAsync();
}

/// <summary>A scenario that reports figures of its own after the run (balance, round trips...).</summary>
internal interface IScenarioMetrics
{
    /// <summary>Called once after the measured phase, before <see cref="IScenario.CleanAsync"/>.</summary>
    Task<IReadOnlyList<ScenarioMetric>> CollectMetricsAsync(CancellationToken cancellationToken);
}

/// <summary>A scenario that can check the store's invariants after the run.</summary>
internal interface IAuditedScenario
{
    /// <summary>Called once after the measured phase, before <see cref="IScenario.CleanAsync"/>.</summary>
    Task<AuditResult> AuditAsync(CancellationToken cancellationToken);
}

/// <summary>A named figure a scenario adds to its results (e.g. <c>load spread</c> = 1 slot).</summary>
internal sealed record ScenarioMetric(string Name, double Value, string Unit);

/// <summary>What a scenario is given at <see cref="IScenario.InitAsync"/>.</summary>
internal sealed record ScenarioContext(
    string Workload,
    int Callers,
    TimeSpan Rtt,
    TimeProvider Time,
    CancellationToken CancellationToken)
{
    /// <summary>A short, unique-per-run suffix for pool ids and session keys.</summary>
    public string RunId { get; init; } = Guid.NewGuid().ToString("N")[..8];

    /// <summary>Jitter of the injected latency (order is kept); zero by default.</summary>
    public TimeSpan Jitter { get; init; }
}

/// <summary>Which step this is.</summary>
/// <param name="CallerIndex">0 ≤ index &lt; callers; in the open model, the slot the step runs in.</param>
/// <param name="Iteration">The caller's own step counter (closed model) or the run's (open model).</param>
/// <param name="IsWarmUp">The step is not measured.</param>
internal readonly record struct StepInfo(int CallerIndex, long Iteration, bool IsWarmUp);

/// <summary>The outcome of one step.</summary>
/// <param name="Allocations">Allocations the step made (a batched step makes several; a failed one none).</param>
/// <param name="ErrorKind">Null when the step succeeded; otherwise a short, stable kind (e.g. <c>no-capacity</c>).</param>
internal readonly record struct StepResult(int Allocations, string? ErrorKind)
{
    public bool IsError => ErrorKind is not null;

    public static StepResult Ok(int allocations = 1) => new(allocations, null);

    public static StepResult Fail(string kind) => new(0, kind);
}

/// <summary>Thrown by scenarios whose driver is not available yet; the run stops at once with this message.</summary>
internal sealed class ScenarioNotWiredException(string message) : Exception(message);
