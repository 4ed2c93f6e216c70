using System.Globalization;
using System.Net;
using System.Text;

namespace Allocator.LoadTests.Reports;

/// <summary>One series of a chart: a name and one value per category (NaN: no value).</summary>
internal sealed record ChartSeries(string Name, IReadOnlyList<double> Values);

/// <summary>One line of a distribution chart: a name and ascending response times in ms.</summary>
internal sealed record DistributionLine(string Name, IReadOnlyList<double> SortedMs);

/// <summary>Hand-written SVG charts: horizontal grouped bars and response-time CDFs.</summary>
internal static class SvgCharts
{
    private static readonly string[] Palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
    private const int Width = 960;
    private const int LabelWidth = 330;
    private const int RightMargin = 90;

    /// <summary>Horizontal grouped bars: one group per category (row), one bar per series.</summary>
    public static string Bars(string title, string axisLabel, IReadOnlyList<string> categories, IReadOnlyList<ChartSeries> series, string valueFormat = "N0")
    {
        const int BarHeight = 18;
        const int GroupGap = 14;
        const int Top = 50;
        var groupHeight = (series.Count * BarHeight) + GroupGap;
        var legendHeight = series.Count > 1 ? 24 : 0;
        var plotHeight = categories.Count * groupHeight;
        var height = Top + plotHeight + 50 + legendHeight;
        var plotWidth = Width - LabelWidth - RightMargin;
        var max = series.SelectMany(s => s.Values).Where(double.IsFinite).DefaultIfEmpty(0).Max();
        var (axisMax, step) = NiceScale(max);

        var svg = Begin(height, title);
        // Grid and axis.
        for (var v = 0.0; v <= axisMax + (step / 2); v += step)
        {
            var x = LabelWidth + (v / axisMax * plotWidth);
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{x:0.#}\" y1=\"{Top - 4}\" x2=\"{x:0.#}\" y2=\"{Top + plotHeight}\" stroke=\"#ddd\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{x:0.#}\" y=\"{Top + plotHeight + 16}\" text-anchor=\"middle\" font-size=\"11\">{Esc(Format(v, "N0"))}</text>");
        }

        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{LabelWidth + (plotWidth / 2)}\" y=\"{Top + plotHeight + 36}\" text-anchor=\"middle\" font-size=\"12\">{Esc(axisLabel)}</text>");
        for (var c = 0; c < categories.Count; c++)
        {
            var groupTop = Top + (c * groupHeight);
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{LabelWidth - 8}\" y=\"{groupTop + (series.Count * BarHeight / 2.0) + 4:0.#}\" text-anchor=\"end\" font-size=\"12\">{Esc(categories[c])}</text>");
            for (var s = 0; s < series.Count; s++)
            {
                var value = c < series[s].Values.Count ? series[s].Values[c] : double.NaN;
                var y = groupTop + (s * BarHeight);
                if (!double.IsFinite(value))
                {
                    svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{LabelWidth + 4}\" y=\"{y + 13}\" font-size=\"11\" fill=\"#888\">not run</text>");
                    continue;
                }

                var w = Math.Max(1, value / axisMax * plotWidth);
                svg.Append(CultureInfo.InvariantCulture, $"<rect x=\"{LabelWidth}\" y=\"{y + 1}\" width=\"{w:0.#}\" height=\"{BarHeight - 2}\" fill=\"{Palette[s % Palette.Length]}\"><title>{Esc(series[s].Name)}: {Esc(Format(value, valueFormat))}</title></rect>");
                svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{LabelWidth + w + 4:0.#}\" y=\"{y + 13}\" font-size=\"11\">{Esc(Format(value, valueFormat))}</text>");
            }
        }

        if (series.Count > 1)
        {
            Legend(svg, series.Select(s => s.Name).ToList(), LabelWidth, height - 14);
        }

        return End(svg);
    }

    /// <summary>Cumulative distribution of response times, one line per strategy; log scale when the range is wide.</summary>
    public static string Cdf(string title, IReadOnlyList<DistributionLine> lines)
    {
        const int Top = 50;
        const int Left = 70;
        const int PlotHeight = 340;
        var plotWidth = Width - Left - 40;
        var legendRows = (lines.Count + 2) / 3;
        var height = Top + PlotHeight + 60 + (legendRows * 20);
        var withData = lines.Where(l => l.SortedMs.Count > 0).ToList();
        var min = withData.Select(l => l.SortedMs[0]).DefaultIfEmpty(0.1).Min();
        var max = withData.Select(l => l.SortedMs[^1]).DefaultIfEmpty(1).Max();
        min = Math.Max(min, 0.001);
        max = Math.Max(max, min * 1.01);
        var log = max / min > 50;

        // Linear axis: from a round value below the fastest answer, so narrow distributions
        // (every answer near one RTT) spread over the width instead of bunching at the right.
        var (_, linearStep) = NiceScale(max - min);
        var lo = Math.Floor(min / linearStep) * linearStep;
        var hi = Math.Max(Math.Ceiling(max / linearStep) * linearStep, lo + linearStep);
        double X(double ms) => log
            ? Left + ((Math.Log10(Math.Max(ms, min)) - Math.Log10(min)) / (Math.Log10(max) - Math.Log10(min)) * plotWidth)
            : Left + ((ms - lo) / (hi - lo) * plotWidth);
        double Y(double fraction) => Top + PlotHeight - (fraction * PlotHeight);

        var svg = Begin(height, title);
        for (var p = 0; p <= 100; p += 10)
        {
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{Left}\" y1=\"{Y(p / 100.0):0.#}\" x2=\"{Left + plotWidth}\" y2=\"{Y(p / 100.0):0.#}\" stroke=\"#ddd\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left - 6}\" y=\"{Y(p / 100.0) + 4:0.#}\" text-anchor=\"end\" font-size=\"11\">{p}%</text>");
        }

        foreach (var tick in log ? XTicks(min, max) : LinearTicks(lo, hi, linearStep))
        {
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{X(tick):0.#}\" y1=\"{Top}\" x2=\"{X(tick):0.#}\" y2=\"{Top + PlotHeight}\" stroke=\"#eee\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{X(tick):0.#}\" y=\"{Top + PlotHeight + 16}\" text-anchor=\"middle\" font-size=\"11\">{Esc(Format(tick, tick < 10 ? "0.##" : "N0"))}</text>");
        }

        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left + (plotWidth / 2)}\" y=\"{Top + PlotHeight + 36}\" text-anchor=\"middle\" font-size=\"12\">response time, ms{(log ? " (log scale)" : "")}</text>");
        svg.Append(CultureInfo.InvariantCulture, $"<text transform=\"translate(16,{Top + (PlotHeight / 2)}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">share of responses at or below</text>");
        for (var i = 0; i < lines.Count; i++)
        {
            var sorted = lines[i].SortedMs;
            if (sorted.Count == 0)
            {
                continue;
            }

            var points = new StringBuilder();
            const int Samples = 300;
            for (var k = 0; k <= Samples; k++)
            {
                var index = Math.Min(sorted.Count - 1, (int)((long)k * (sorted.Count - 1) / Samples));
                var fraction = (index + 1.0) / sorted.Count;
                points.Append(CultureInfo.InvariantCulture, $"{X(sorted[index]):0.#},{Y(fraction):0.#} ");
            }

            svg.Append(CultureInfo.InvariantCulture, $"<polyline fill=\"none\" stroke=\"{Palette[i % Palette.Length]}\" stroke-width=\"2\" points=\"{points.ToString().TrimEnd()}\"><title>{Esc(lines[i].Name)}</title></polyline>");
        }

        Legend(svg, lines.Select(l => l.Name).ToList(), Left, Top + PlotHeight + 56);
        return End(svg);
    }

    private static void Legend(StringBuilder svg, IReadOnlyList<string> names, int left, int top)
    {
        const int PerRow = 3;
        var columnWidth = (Width - left - 20) / PerRow;
        for (var i = 0; i < names.Count; i++)
        {
            var x = left + (i % PerRow * columnWidth);
            var y = top + (i / PerRow * 20);
            svg.Append(CultureInfo.InvariantCulture, $"<rect x=\"{x}\" y=\"{y - 10}\" width=\"12\" height=\"12\" fill=\"{Palette[i % Palette.Length]}\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{x + 18}\" y=\"{y}\" font-size=\"12\">{Esc(names[i])}</text>");
        }
    }

    private static StringBuilder Begin(int height, string title)
    {
        var svg = new StringBuilder();
        svg.Append(CultureInfo.InvariantCulture, $"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{Width}\" height=\"{height}\" viewBox=\"0 0 {Width} {height}\" font-family=\"Helvetica, Arial, sans-serif\">");
        svg.Append(CultureInfo.InvariantCulture, $"<rect width=\"{Width}\" height=\"{height}\" fill=\"white\"/>");
        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Width / 2}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{Esc(title)}</text>");
        return svg;
    }

    private static string End(StringBuilder svg) => svg.Append("</svg>\n").ToString();

    private static (double Max, double Step) NiceScale(double max)
    {
        if (max <= 0)
        {
            return (1, 0.25);
        }

        var rough = max / 5;
        var magnitude = Math.Pow(10, Math.Floor(Math.Log10(rough)));
        var step = new[] { 1, 2, 2.5, 5, 10 }.Select(f => f * magnitude).First(s => s >= rough);
        return (Math.Ceiling(max / step) * step, step);
    }

    private static IEnumerable<double> LinearTicks(double lo, double hi, double step)
    {
        for (var v = lo; v <= hi + (step / 1000); v += step)
        {
            yield return v;
        }
    }

    private static IEnumerable<double> XTicks(double min, double max)
    {
        for (var decade = Math.Pow(10, Math.Floor(Math.Log10(min))); decade <= max; decade *= 10)
        {
            foreach (var f in new[] { 1.0, 2, 5 })
            {
                var v = decade * f;
                if (v >= min && v <= max)
                {
                    yield return v;
                }
            }
        }
    }

    private static string Format(double value, string format) => value.ToString(format, CultureInfo.InvariantCulture);

    private static string Esc(string text) => WebUtility.HtmlEncode(text);
}
