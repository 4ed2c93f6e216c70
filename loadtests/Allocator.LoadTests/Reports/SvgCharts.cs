using System.Globalization;
using System.Net;
using System.Text;
using Allocator.LoadTests.Harness;

namespace Allocator.LoadTests.Reports;

/// <summary>One series of a chart: a name and one value per category (NaN: no value).</summary>
internal sealed record ChartSeries(string Name, IReadOnlyList<double> Values);

/// <summary>One line of a distribution chart: a name and ascending response times in ms.</summary>
internal sealed record DistributionLine(string Name, IReadOnlyList<double> SortedMs);

/// <summary>One line of a time chart: a name and one value per second.</summary>
internal sealed record TimeSeries(string Name, IReadOnlyList<double> PerSecond);

/// <summary>
/// SVG charts written here (no charting package is served for .NET that renders SVG headless):
/// horizontal grouped bars (linear or log axis), response-time CDFs, latency by percentile up to
/// p99.9 on log scales, and throughput over time.
/// </summary>
internal static class SvgCharts
{
    private static readonly string[] Palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
    private const int Width = 960;
    private const int LabelWidth = 330;
    private const int RightMargin = 90;

    /// <summary>Horizontal grouped bars: one group per category (row), one bar per series.</summary>
    /// <param name="log">A log axis (decades, 1-2-5 ticks): for values that differ by orders of magnitude, as tail latencies of different strategies do.</param>
    public static string Bars(string title, string axisLabel, IReadOnlyList<string> categories, IReadOnlyList<ChartSeries> series, string valueFormat = "N0", bool log = false)
    {
        const int BarHeight = 18;
        const int GroupGap = 14;
        const int Top = 50;
        var groupHeight = (series.Count * BarHeight) + GroupGap;
        var legendHeight = series.Count > 1 ? 24 : 0;
        var plotHeight = categories.Count * groupHeight;
        var height = Top + plotHeight + 50 + legendHeight;
        var plotWidth = Width - LabelWidth - RightMargin;
        var values = series.SelectMany(s => s.Values).Where(double.IsFinite).ToList();
        var max = values.DefaultIfEmpty(0).Max();
        var (axisMax, step) = NiceScale(max);
        var positive = values.Where(v => v > 0).DefaultIfEmpty(1).ToList();
        // One decade below the smallest value's, so that bars near a decade boundary still show their length.
        var (logLo, logHi) = Decades(positive.Min() / 10, positive.Max());
        double BarLength(double value) => log
            ? (Math.Log10(Math.Max(value, logLo)) - Math.Log10(logLo)) / (Math.Log10(logHi) - Math.Log10(logLo)) * plotWidth
            : value / axisMax * plotWidth;

        var svg = Begin(height, title);
        // Grid and axis.
        foreach (var v in log ? LogTicks(logLo, logHi) : LinearTicks(0, axisMax, step))
        {
            var x = LabelWidth + BarLength(v);
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{x:0.#}\" y1=\"{Top - 4}\" x2=\"{x:0.#}\" y2=\"{Top + plotHeight}\" stroke=\"#ddd\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{x:0.#}\" y=\"{Top + plotHeight + 16}\" text-anchor=\"middle\" font-size=\"11\">{Esc(Format(v, v < 10 ? "0.##" : "N0"))}</text>");
        }

        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{LabelWidth + (plotWidth / 2)}\" y=\"{Top + plotHeight + 36}\" text-anchor=\"middle\" font-size=\"12\">{Esc(axisLabel)}{(log ? " (log scale)" : "")}</text>");
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

                var w = Math.Max(1, BarLength(value));
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

    /// <summary>
    /// Response time by percentile, both axes logarithmic: the x axis spreads 0, 90, 99 and 99.9 %
    /// evenly (position log10(1 / (1 − p))), so the tail gets as much room as the body. A line
    /// stops at the highest percentile its sample count resolves (p99.9 needs 1,000 answers).
    /// </summary>
    public static string Percentiles(string title, IReadOnlyList<DistributionLine> lines)
    {
        const int Top = 50;
        const int Left = 70;
        const int PlotHeight = 340;
        const double Nines = 3; // up to p99.9
        var plotWidth = Width - Left - 40;
        var legendRows = (lines.Count + 2) / 3;
        var height = Top + PlotHeight + 60 + (legendRows * 20);
        var withData = lines.Where(l => l.SortedMs.Count > 0).ToList();
        var (lo, hi) = Decades(
            Math.Max(0.001, withData.Select(l => l.SortedMs[0]).DefaultIfEmpty(1).Min()),
            Math.Max(0.001, withData.Select(l => l.SortedMs[^1]).DefaultIfEmpty(10).Max()));
        double X(double nines) => Left + (nines / Nines * plotWidth);
        double Y(double ms) => Top + PlotHeight - ((Math.Log10(Math.Max(ms, lo)) - Math.Log10(lo)) / (Math.Log10(hi) - Math.Log10(lo)) * PlotHeight);

        var svg = Begin(height, title);
        foreach (var tick in LogTicks(lo, hi))
        {
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{Left}\" y1=\"{Y(tick):0.#}\" x2=\"{Left + plotWidth}\" y2=\"{Y(tick):0.#}\" stroke=\"#ddd\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left - 6}\" y=\"{Y(tick) + 4:0.#}\" text-anchor=\"end\" font-size=\"11\">{Esc(Format(tick, tick < 10 ? "0.##" : "N0"))}</text>");
        }

        foreach (var (nines, label) in new[] { (0.0, "p0"), (Math.Log10(2), "p50"), (1.0, "p90"), (2.0, "p99"), (3.0, "p99.9") })
        {
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{X(nines):0.#}\" y1=\"{Top}\" x2=\"{X(nines):0.#}\" y2=\"{Top + PlotHeight}\" stroke=\"#eee\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{X(nines):0.#}\" y=\"{Top + PlotHeight + 16}\" text-anchor=\"middle\" font-size=\"11\">{label}</text>");
        }

        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left + (plotWidth / 2)}\" y=\"{Top + PlotHeight + 36}\" text-anchor=\"middle\" font-size=\"12\">percentile (log scale of 1 / (1 − p))</text>");
        svg.Append(CultureInfo.InvariantCulture, $"<text transform=\"translate(16,{Top + (PlotHeight / 2)}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">response time, ms (log scale)</text>");
        for (var i = 0; i < lines.Count; i++)
        {
            var sorted = lines[i].SortedMs;
            if (sorted.Count == 0)
            {
                continue;
            }

            // The highest percentile this many answers resolve: 1 − 1/n.
            var maxNines = Math.Min(Nines, Math.Log10(sorted.Count));
            var points = new StringBuilder();
            const int Samples = 300;
            for (var k = 0; k <= Samples; k++)
            {
                var nines = maxNines * k / Samples;
                var p = 1 - Math.Pow(10, -nines);
                points.Append(CultureInfo.InvariantCulture, $"{X(nines):0.#},{Y(LatencyStatistics.Percentile(sorted, p)):0.#} ");
            }

            svg.Append(CultureInfo.InvariantCulture, $"<polyline fill=\"none\" stroke=\"{Palette[i % Palette.Length]}\" stroke-width=\"2\" points=\"{points.ToString().TrimEnd()}\"><title>{Esc(lines[i].Name)}</title></polyline>");
        }

        Legend(svg, lines.Select(l => l.Name).ToList(), Left, Top + PlotHeight + 56);
        return End(svg);
    }

    /// <summary>A value per second over the run, one line per series (e.g. allocations answered in each second).</summary>
    public static string OverTime(string title, string axisLabel, IReadOnlyList<TimeSeries> series)
    {
        const int Top = 50;
        const int Left = 80;
        const int PlotHeight = 300;
        var plotWidth = Width - Left - 40;
        var legendRows = (series.Count + 2) / 3;
        var height = Top + PlotHeight + 60 + (legendRows * 20);
        var seconds = Math.Max(1, series.Select(s => s.PerSecond.Count).DefaultIfEmpty(1).Max());
        var (axisMax, step) = NiceScale(series.SelectMany(s => s.PerSecond).DefaultIfEmpty(0).Max());
        var (_, secondStep) = NiceScale(seconds);
        double X(double second) => Left + (second / seconds * plotWidth);
        double Y(double value) => Top + PlotHeight - (value / axisMax * PlotHeight);

        var svg = Begin(height, title);
        foreach (var v in LinearTicks(0, axisMax, step))
        {
            svg.Append(CultureInfo.InvariantCulture, $"<line x1=\"{Left}\" y1=\"{Y(v):0.#}\" x2=\"{Left + plotWidth}\" y2=\"{Y(v):0.#}\" stroke=\"#ddd\"/>");
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left - 6}\" y=\"{Y(v) + 4:0.#}\" text-anchor=\"end\" font-size=\"11\">{Esc(Format(v, "N0"))}</text>");
        }

        foreach (var s in LinearTicks(0, seconds, Math.Max(1, secondStep)))
        {
            svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{X(s):0.#}\" y=\"{Top + PlotHeight + 16}\" text-anchor=\"middle\" font-size=\"11\">{Esc(Format(s, "0.#"))}</text>");
        }

        svg.Append(CultureInfo.InvariantCulture, $"<text x=\"{Left + (plotWidth / 2)}\" y=\"{Top + PlotHeight + 36}\" text-anchor=\"middle\" font-size=\"12\">seconds into the measured phase</text>");
        svg.Append(CultureInfo.InvariantCulture, $"<text transform=\"translate(16,{Top + (PlotHeight / 2)}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">{Esc(axisLabel)}</text>");
        for (var i = 0; i < series.Count; i++)
        {
            var values = series[i].PerSecond;
            if (values.Count == 0)
            {
                continue;
            }

            // Each value is drawn at the middle of its second.
            var points = string.Join(' ', values.Select((v, second) => string.Create(CultureInfo.InvariantCulture, $"{X(second + 0.5):0.#},{Y(v):0.#}")));
            svg.Append(CultureInfo.InvariantCulture, $"<polyline fill=\"none\" stroke=\"{Palette[i % Palette.Length]}\" stroke-width=\"2\" points=\"{points}\"><title>{Esc(series[i].Name)}</title></polyline>");
        }

        Legend(svg, series.Select(s => s.Name).ToList(), Left, Top + PlotHeight + 56);
        return End(svg);
    }

    /// <summary>Whole decades around [min, max]: the bounds of a log axis.</summary>
    private static (double Lo, double Hi) Decades(double min, double max)
    {
        var lo = Math.Pow(10, Math.Floor(Math.Log10(Math.Max(min, 1e-6))));
        var hi = Math.Pow(10, Math.Ceiling(Math.Log10(Math.Max(max, min))));
        return (lo, hi <= lo ? lo * 10 : hi);
    }

    /// <summary>1, 2 and 5 of every decade from <paramref name="lo"/> to <paramref name="hi"/>.</summary>
    private static IEnumerable<double> LogTicks(double lo, double hi)
    {
        for (var decade = lo; decade <= hi * 1.0001; decade *= 10)
        {
            foreach (var f in new[] { 1.0, 2, 5 })
            {
                if (decade * f <= hi * 1.0001)
                {
                    yield return decade * f;
                }
            }
        }
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
