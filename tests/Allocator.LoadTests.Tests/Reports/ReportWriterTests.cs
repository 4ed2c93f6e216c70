using System.Xml.Linq;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Reports;

namespace Allocator.LoadTests.Tests.Reports;

public sealed class ReportWriterTests
{
    [Fact]
    public void Percentiles_OnALogScale_PlaceTheTailWhereItIs()
    {
        // 998 answers of 10 ms and two of 1,000 ms: p99 is 10 ms, p99.9 is 1,000 ms, two decades up.
        double[] sorted = [.. Enumerable.Repeat(10.0, 998), 1000.0, 1000.0];

        var document = XDocument.Parse(Charts.Percentiles("t", [new DistributionLine("a", sorted)]));

        var points = SeriesLines(document).MaxBy(l => l.Count)!;
        var (first, last) = (points[0], points[^1]);
        last[0].Should().BeGreaterThan(first[0]);
        last[1].Should().BeLessThan(first[1], "the p99.9 point (1,000 ms) is drawn higher than the p0 point (10 ms)");
        var labels = document.Descendants().Where(e => e.Name.LocalName == "text").Select(e => e.Value).ToList();
        labels.Should().Contain(["10", "100", "1,000", "p99", "p99.9"]);
    }

    [Fact]
    public void Bars_OnALogAxis_SpanTheDecadesOfTheValues()
    {
        var document = XDocument.Parse(Charts.Bars("t", "ms", ["fast", "slow"], [new ChartSeries("p99", [2, 2000])], "N1", log: true));

        var widths = document.Descendants().Where(e => e.Name.LocalName == "rect" && (e.Attribute("style")?.Value.Contains(FirstColour, StringComparison.Ordinal) ?? false))
            .Select(e => double.Parse(e.Attribute("width")!.Value, System.Globalization.CultureInfo.InvariantCulture)).ToList();
        widths.Should().HaveCount(2);
        (widths[1] / widths[0]).Should().BeLessThan(20, "on a log axis 2,000 ms is three decades past 2 ms, not a thousand times as long");
        document.Descendants().Where(e => e.Name.LocalName == "text").Select(e => e.Value).Should().Contain(["1", "10", "100", "1,000", "10,000"]);
    }

    /// <summary>The colour of the first series (the palette's blue), as OxyPlot writes it in a style.</summary>
    private const string FirstColour = "rgb(31,119,180)";

    /// <summary>The first series' lines (and its legend sample), in drawing order, as points.</summary>
    private static List<List<double[]>> SeriesLines(XDocument svg) =>
        [.. svg.Descendants().Where(e => e.Name.LocalName == "polyline" && (e.Attribute("style")?.Value.Contains("stroke:" + FirstColour, StringComparison.Ordinal) ?? false))
            .Select(e => e.Attribute("points")!.Value.Split(' ', StringSplitOptions.RemoveEmptyEntries)
                .Select(p => p.Split(',').Select(v => double.Parse(v, System.Globalization.CultureInfo.InvariantCulture)).ToArray()).ToList())];

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
                AllocationsPerSecond = [400, 450, 150],
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
            var html = File.ReadAllText(Path.Combine(directory, "report.html"));
            html.Should().Contain("<svg").And.Contain("Strategies compared").And.Contain("Targets").And.Contain("not wired yet: needs the pool grain");
            html.Should().NotContain("<script").And.NotContain("src=", "the page is self-contained: charts inline, nothing fetched");
            var ids = System.Text.RegularExpressions.Regex.Matches(html, "\\bid=\"([^\"]+)\"").Select(m => m.Groups[1].Value).ToList();
            ids.Should().OnlyHaveUniqueItems("each inlined chart clips by its own paths");
            foreach (var line in new[] { "measured: 1,000 steps, 1,000 allocations in 2.00 s", "invariant audit (memory): passed", "load spread: 1 slots" })
            {
                markdown.Should().Contain(line, "one report model");
                html.Should().Contain(line, "one report model, rendered twice");
            }

            foreach (var svg in new[] { "throughput.svg", "p99.svg", "latency-cdf.svg", "latency-percentiles.svg", "throughput-over-time.svg" })
            {
                var document = XDocument.Parse(File.ReadAllText(Path.Combine(directory, svg)));
                document.Root!.Name.LocalName.Should().Be("svg");
                markdown.Should().Contain($"![{svg}]({svg})");
            }

            File.ReadAllText(Path.Combine(directory, "p99.svg")).Should().Contain("(log scale)");
            var percentiles = File.ReadAllText(Path.Combine(directory, "latency-percentiles.svg"));
            percentiles.Should().Contain(">p99.9<").And.Contain("response time, ms (log scale)");
            var overTime = XDocument.Parse(File.ReadAllText(Path.Combine(directory, "throughput-over-time.svg")));
            SeriesLines(overTime)[0].Should().HaveCount(2, "one point per whole second; the partial last second is left out");
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
