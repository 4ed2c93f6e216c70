using System.Runtime.InteropServices;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Reports;

/// <summary>Where and how a run was made, printed with every report.</summary>
/// <param name="Note">Anything else that shaped the figures (e.g. Orleans' dashboard switched on); null when nothing did.</param>
internal sealed record RunEnvironment(string Command, string Store, DateTimeOffset StartedAt, bool Quick, string? Note = null)
{
    public static string Machine =>
        $"{Environment.ProcessorCount} cores, {GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1024.0 * 1024 * 1024):0.#} GiB memory, "
        + $"{RuntimeInformation.OSDescription}, {RuntimeInformation.FrameworkDescription}";
}

/// <summary>Writes a workload's report: one <see cref="WorkloadReport"/>, rendered as Markdown and as self-contained HTML, and its charts as SVG files.</summary>
internal static class ReportWriter
{
    /// <summary>Writes <c>report.md</c>, <c>report.html</c> and the charts into <paramref name="directory"/>; returns the Markdown path.</summary>
    public static string Write(string directory, string workload, string question, RunEnvironment environment, IReadOnlyList<RunResult> results)
    {
        var report = WorkloadReport.Build(workload, question, environment, results);
        Directory.CreateDirectory(directory);
        foreach (var chart in report.Charts)
        {
            File.WriteAllText(Path.Combine(directory, chart.File), chart.Svg);
        }

        var markdown = Path.Combine(directory, "report.md");
        File.WriteAllText(markdown, MarkdownReport.Render(report));
        File.WriteAllText(Path.Combine(directory, "report.html"), HtmlReport.Render(report));
        return markdown;
    }
}
