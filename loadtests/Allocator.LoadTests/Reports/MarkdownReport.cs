using System.Globalization;
using System.Text;

namespace Allocator.LoadTests.Reports;

/// <summary>A <see cref="WorkloadReport"/> as Markdown (<c>report.md</c>, and what docs/benchmarks.md quotes); the charts are the SVG files beside it.</summary>
internal static class MarkdownReport
{
    public static string Render(WorkloadReport report)
    {
        var sb = new StringBuilder();
        sb.AppendLine(CultureInfo.InvariantCulture, $"# {report.Title}").AppendLine();
        sb.AppendLine(CultureInfo.InvariantCulture, $"{report.Question}.").AppendLine();
        foreach (var (name, value) in report.Facts)
        {
            sb.AppendLine(name == "command" ? $"- {name}: `{value}`" : $"- {name}: {value}");
        }

        sb.AppendLine().AppendLine("## Summary").AppendLine();
        sb.Append(Table(report.Summary)).AppendLine();
        sb.AppendLine(report.SummaryNote).AppendLine();
        sb.AppendLine("## Strategies compared").AppendLine();
        sb.Append(Table(report.Comparison)).AppendLine();
        if (report.Targets is { } targets)
        {
            sb.AppendLine("## Targets (issue 5; measured, never asserted)").AppendLine();
            sb.Append(Table(targets)).AppendLine();
        }

        foreach (var chart in report.Charts)
        {
            sb.AppendLine(CultureInfo.InvariantCulture, $"![{chart.File}]({chart.File})").AppendLine();
        }

        sb.AppendLine("## Errors").AppendLine();
        sb.AppendLine(report.Errors.Rows.Count == 0 ? "None." : Table(report.Errors));
        sb.AppendLine("## Runs");
        foreach (var run in report.Runs)
        {
            sb.AppendLine().AppendLine(CultureInfo.InvariantCulture, $"### {run.Strategy}").AppendLine();
            if (run.NotRun is not null)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"Not run: {run.NotRun}");
                continue;
            }

            foreach (var line in run.Lines)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"- {line}");
            }

            if (run.Audit is { } audit)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"- {audit.Verdict}");
                foreach (var line in audit.Checked)
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"  - {line}");
                }

                foreach (var violation in audit.Violations)
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"  - **violation** {violation}");
                }
            }
        }

        return sb.ToString();
    }

    public static string Table(ReportTable table) => Table(table.Header, table.Rows);

    public static string Table(IReadOnlyList<string> header, IReadOnlyList<string[]> rows)
    {
        var sb = new StringBuilder();
        sb.Append("| ").Append(string.Join(" | ", header)).AppendLine(" |");
        sb.Append('|').Append(string.Concat(header.Select(_ => "---|"))).AppendLine();
        foreach (var row in rows)
        {
            sb.Append("| ").Append(string.Join(" | ", row.Select(c => c.Replace("|", "\\|", StringComparison.Ordinal)))).AppendLine(" |");
        }

        return sb.ToString();
    }
}
