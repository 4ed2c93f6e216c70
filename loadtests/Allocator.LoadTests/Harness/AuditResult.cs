namespace Allocator.LoadTests.Harness;

/// <summary>One broken invariant found by an audit.</summary>
internal sealed record AuditViolation(string Check, string? PoolId, string? WorkerId, string Detail)
{
    public override string ToString() =>
        $"{Check}: {Detail}" + (PoolId is null ? "" : $" (pool {PoolId}" + (WorkerId is null ? ")" : $", worker {WorkerId})"));
}

/// <summary>The answer of an invariant audit: what was checked and what was broken.</summary>
/// <param name="Source">Where the audit looked, e.g. <c>postgres schema bench_1a2b</c> or <c>memory</c>.</param>
/// <param name="Checked">Human-readable lines of what was checked, with counts.</param>
internal sealed record AuditResult(string Source, IReadOnlyList<string> Checked, IReadOnlyList<AuditViolation> Violations)
{
    public bool Passed => Violations.Count == 0;

    public static AuditResult Merge(string source, params AuditResult[] parts) =>
        new(source, [.. parts.SelectMany(p => p.Checked)], [.. parts.SelectMany(p => p.Violations)]);

    public void WriteTo(TextWriter writer)
    {
        writer.WriteLine($"invariant audit ({Source}): {(Passed ? "PASSED" : $"FAILED, {Violations.Count} violation(s)")}");
        foreach (var line in Checked)
        {
            writer.WriteLine($"  checked: {line}");
        }

        foreach (var violation in Violations.Take(50))
        {
            writer.WriteLine($"  VIOLATION {violation}");
        }

        if (Violations.Count > 50)
        {
            writer.WriteLine($"  ... and {Violations.Count - 50} more");
        }
    }
}
