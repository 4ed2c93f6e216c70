using System.Globalization;
using System.Net;
using System.Text;

namespace Allocator.LoadTests.Reports;

/// <summary>
/// A <see cref="WorkloadReport"/> as one self-contained HTML page (<c>report.html</c>): the same
/// sections as the Markdown, the charts inlined as SVG, no script, no request to anywhere.
/// </summary>
internal static class HtmlReport
{
    private const string Style =
        "body{font-family:Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}"
        + "h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}"
        + "table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        + "th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}.bad{color:#b00;font-weight:bold}.note{color:#555;font-size:13px}"
        + "figure{margin:1em 0}svg{max-width:100%;height:auto}code{background:#f4f4f4;padding:1px 4px}";

    public static string Render(WorkloadReport report)
    {
        var sb = new StringBuilder();
        sb.AppendLine("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">");
        sb.AppendLine(CultureInfo.InvariantCulture, $"<title>{E(report.Title)}: load test report</title><style>{Style}</style></head><body>");
        sb.AppendLine(CultureInfo.InvariantCulture, $"<h1>{E(report.Title)}</h1><p>{E(report.Question)}.</p><ul>");
        foreach (var (name, value) in report.Facts)
        {
            sb.AppendLine(CultureInfo.InvariantCulture, $"<li>{E(name)}: {(name == "command" ? $"<code>{E(value)}</code>" : E(value))}</li>");
        }

        sb.AppendLine("</ul><h2>Summary</h2>");
        Table(sb, report.Summary);
        sb.AppendLine(CultureInfo.InvariantCulture, $"<p class=\"note\">{E(report.SummaryNote)}</p><h2>Strategies compared</h2>");
        Table(sb, report.Comparison);
        if (report.Targets is { } targets)
        {
            sb.AppendLine("<h2>Targets (issue 5; measured, never asserted)</h2>");
            Table(sb, targets);
        }

        sb.AppendLine("<h2>Charts</h2>");
        foreach (var chart in report.Charts)
        {
            var name = Path.GetFileNameWithoutExtension(chart.File);
            sb.AppendLine(CultureInfo.InvariantCulture, $"<figure id=\"{E(name)}\">{UniqueIds(chart.Svg, name)}</figure>");
        }

        sb.AppendLine("<h2>Errors</h2>");
        if (report.Errors.Rows.Count == 0)
        {
            sb.AppendLine("<p>None.</p>");
        }
        else
        {
            Table(sb, report.Errors);
        }

        sb.AppendLine("<h2>Runs</h2>");
        foreach (var run in report.Runs)
        {
            sb.AppendLine(CultureInfo.InvariantCulture, $"<h3>{E(run.Strategy)}</h3>");
            if (run.NotRun is not null)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"<p class=\"bad\">Not run: {E(run.NotRun)}</p>");
                continue;
            }

            sb.AppendLine("<ul>");
            foreach (var line in run.Lines)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"<li>{E(line)}</li>");
            }

            if (run.Audit is { } audit)
            {
                sb.AppendLine(CultureInfo.InvariantCulture, $"<li{(audit.Passed ? "" : " class=\"bad\"")}>{E(audit.Verdict)}<ul>");
                foreach (var line in audit.Checked)
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"<li>{E(line)}</li>");
                }

                foreach (var violation in audit.Violations)
                {
                    sb.AppendLine(CultureInfo.InvariantCulture, $"<li class=\"bad\">violation: {E(violation)}</li>");
                }

                sb.AppendLine("</ul></li>");
            }

            sb.AppendLine("</ul>");
        }

        sb.AppendLine("</body></html>");
        return sb.ToString();
    }

    private static void Table(StringBuilder sb, ReportTable table)
    {
        sb.Append("<table><tr>");
        foreach (var h in table.Header)
        {
            sb.Append(CultureInfo.InvariantCulture, $"<th>{E(h)}</th>");
        }

        sb.AppendLine("</tr>");
        foreach (var row in table.Rows)
        {
            sb.Append("<tr>");
            foreach (var cell in row)
            {
                var css = cell.StartsWith("FAILED", StringComparison.Ordinal) || cell == "MISSED" ? " class=\"bad\"" : "";
                sb.Append(CultureInfo.InvariantCulture, $"<td{css}>{E(cell)}</td>");
            }

            sb.AppendLine("</tr>");
        }

        sb.AppendLine("</table>");
    }

    /// <summary>
    /// The chart with its element ids prefixed: every exported chart numbers its clip paths from 1,
    /// and in one page <c>url(#clipPath1)</c> would name the first chart's, clipping the others.
    /// </summary>
    private static string UniqueIds(string svg, string prefix) =>
        svg.Replace("id=\"", $"id=\"{prefix}-", StringComparison.Ordinal).Replace("url(#", $"url(#{prefix}-", StringComparison.Ordinal);

    private static string E(string s) => WebUtility.HtmlEncode(s);
}
