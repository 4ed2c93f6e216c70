using System.Xml.Linq;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Reports;

namespace Allocator.LoadTests.Tests.Reports;

public sealed class ReportWriterTests
{
    [Fact]
    public void Write_RunAndNotRunStrategies_WritesMarkdownHtmlAndWellFormedSvg()
    {
        var directory = Path.Combine(Path.GetTempPath(), "allocator-report-test-" + Guid.NewGuid().ToString("N"));
        try
        {
            var latencies = Enumerable.Range(1, 1000).Select(i => 90 + (i / 100.0)).ToArray();
            var ran = RunResult.Failed("storm-90", "skip-locked unbatched", new ClosedModel(48), TimeSpan.FromMilliseconds(90), new RunLimits(1000, null, TimeSpan.Zero), "x") with
            {
                Failure = null,
                Steps = 1000,
                Allocations = 1000,
                Elapsed = TimeSpan.FromSeconds(2),
                SortedLatenciesMs = latencies,
                Latency = LatencyStatistics.FromSorted(latencies),
                Metrics = [new ScenarioMetric(MetricNames.LoadSpread, 1, "slots"), new ScenarioMetric(MetricNames.MeanExcess, 12.5, "points")],
                Audit = new AuditResult("memory", ["checked"], []),
            };
            var notRun = RunResult.Failed("storm-90", "skip-locked batched (pool grain)", new ClosedModel(48), TimeSpan.FromMilliseconds(90), new RunLimits(1000, null, TimeSpan.Zero), "not wired yet: needs the pool grain");
            var environment = new RunEnvironment("dotnet run -- storm-90 --quick", "memory", DateTimeOffset.UnixEpoch, Quick: true);

            var markdownPath = ReportWriter.Write(directory, "storm-90", "the question", environment, [notRun, ran]);

            var markdown = File.ReadAllText(markdownPath);
            markdown.Should().Contain("| strategy | RTT | callers | mean | p50 | p95 | p99 | CV | allocations/s | errors | 10k allocations | spread | mean excess | % of C/RTT | audit |");
            markdown.Should().Contain("| skip-locked unbatched | 90 ms | 48 |");
            markdown.Should().Contain("20.0s (extrapolated)");
            markdown.Should().Contain("93.8%");
            markdown.Should().Contain("not wired yet: needs the pool grain");
            markdown.Should().Contain("![throughput.svg](throughput.svg)");
            File.ReadAllText(Path.Combine(directory, "report.html")).Should().Contain("<svg");
            foreach (var svg in new[] { "throughput.svg", "p99.svg", "latency-cdf.svg" })
            {
                var document = XDocument.Parse(File.ReadAllText(Path.Combine(directory, svg)));
                document.Root!.Name.LocalName.Should().Be("svg");
            }
        }
        finally
        {
            if (Directory.Exists(directory))
            {
                Directory.Delete(directory, recursive: true);
            }
        }
    }
}
