using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Workloads;

namespace Allocator.LoadTests.Tests.Workloads;

public sealed class TargetsTests
{
    [Fact]
    public void WideTarget_BatchedAgainstUnbatched_IsTheRatioOfThroughputs()
    {
        var checks = Targets.For("wide-250", [Result("skip-locked batched (pool grain)", 3_200), Result("skip-locked unbatched", 64)]);

        checks.Should().ContainSingle(c => c.Target == "batched ≥ 45× unbatched").Which.Should().Match<TargetCheck>(c => c.Measured == "50×" && c.Met == true);
        checks.Should().ContainSingle(c => c.Target.StartsWith("batched ≥ 3,000", StringComparison.Ordinal)).Which.Met.Should().BeTrue();
    }

    [Fact]
    public void StormTarget_WithoutBaseline_IsNotMeasured()
    {
        var checks = Targets.For("storm-90", [Result("skip-locked unbatched", 500)]);

        checks.Should().ContainSingle(c => c.Target.Contains("baseline", StringComparison.Ordinal)).Which.Verdict.Should().Be("not measured");
    }

    private static RunResult Result(string scenario, double throughput) =>
        RunResult.Failed("w", scenario, new ClosedModel(16), TimeSpan.FromMilliseconds(250), new RunLimits(null, TimeSpan.FromSeconds(1), TimeSpan.Zero), "x") with
        {
            Failure = null,
            Allocations = (long)(throughput * 10),
            Elapsed = TimeSpan.FromSeconds(10),
        };
}
