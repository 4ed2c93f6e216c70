namespace Allocator.LoadTests.Harness;

/// <summary>How load is offered.</summary>
internal abstract record LoadModel
{
    /// <summary>Concurrency: callers in the closed model, the in-flight limit in the open model.</summary>
    public abstract int Callers { get; }

    public abstract string Describe();
}

/// <summary>
/// Closed model: <see cref="Callers"/> callers, each starting its next step when the previous
/// one answers. Throughput is bounded by callers / response time.
/// </summary>
internal sealed record ClosedModel(int Callers) : LoadModel
{
    public override int Callers { get; } = Callers > 0 ? Callers : throw new ArgumentOutOfRangeException(nameof(Callers));

    public override string Describe() => $"closed, {Callers} callers";
}

/// <summary>
/// Open model: steps start at a fixed rate whatever the answers, at most <see cref="MaxInFlight"/>
/// at once. Response time counts from the step's scheduled start, so a backlog shows up in the
/// figures instead of silently lowering the offered rate (no coordinated omission).
/// </summary>
internal sealed record OpenModel(double RatePerSecond, int MaxInFlight) : LoadModel
{
    public override int Callers => MaxInFlight;

    public override string Describe() => $"open, {RatePerSecond:0.#} steps/s, at most {MaxInFlight} in flight";
}

/// <summary>When a run stops and what is left out of it.</summary>
/// <param name="Allocations">Stop once this many measured allocations succeeded (null: no count limit).</param>
/// <param name="Duration">Stop once the measured phase lasted this long (null: no time limit).</param>
/// <param name="WarmUp">Steps started before this much time has passed are not measured.</param>
internal sealed record RunLimits(long? Allocations, TimeSpan? Duration, TimeSpan WarmUp)
{
    public void Validate()
    {
        if (Allocations is null && Duration is null)
        {
            throw new ArgumentException("A run needs an allocation count, a duration, or both.");
        }
    }

    public string Describe()
    {
        var parts = new List<string>();
        if (Allocations is { } n)
        {
            parts.Add($"{n:N0} allocations");
        }

        if (Duration is { } d)
        {
            parts.Add($"{d.TotalSeconds:0.#} s");
        }

        return string.Join(" or ", parts) + (WarmUp > TimeSpan.Zero ? $", after {WarmUp.TotalSeconds:0.#} s warm-up" : "");
    }
}
