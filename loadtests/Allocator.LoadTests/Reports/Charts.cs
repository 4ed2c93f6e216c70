using System.Globalization;
using Allocator.LoadTests.Harness;
using OxyPlot;
using OxyPlot.Axes;
using OxyPlot.Legends;
using OxyPlot.Series;

namespace Allocator.LoadTests.Reports;

/// <summary>One series of a chart: a name and one value per category (NaN: no value).</summary>
internal sealed record ChartSeries(string Name, IReadOnlyList<double> Values);

/// <summary>One line of a distribution chart: a name and ascending response times in ms.</summary>
internal sealed record DistributionLine(string Name, IReadOnlyList<double> SortedMs);

/// <summary>One line of a time chart: a name and one value per second.</summary>
internal sealed record TimeSeries(string Name, IReadOnlyList<double> PerSecond);

/// <summary>
/// The report charts, drawn by OxyPlot (OxyPlot.Core's plot models and SVG exporter, managed
/// code only; ADR 0019): grouped horizontal bars (linear or log axis), latency by percentile up
/// to p99.9 on log scales, the response-time distribution and throughput over time.
/// </summary>
/// <remarks>
/// OxyPlot measures text with its own font metrics (no GUI, no native library), so a chart is
/// the same SVG on every machine; the SVG is well-formed XML without a prolog, written to a file
/// as it is and inlined into the HTML report.
/// </remarks>
internal static class Charts
{
    private const double Width = 960;

    private static readonly OxyColor[] Palette =
        [.. new[] { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f" }.Select(OxyColor.Parse)];

    /// <summary>Horizontal grouped bars: one group per category (top to bottom), one bar per series.</summary>
    /// <param name="log">A log axis: for values that differ by orders of magnitude, as tail latencies of different strategies do.</param>
    public static string Bars(string title, string axisLabel, IReadOnlyList<string> categories, IReadOnlyList<ChartSeries> series, string valueFormat = "N0", bool log = false)
    {
        var model = NewModel(title, series.Count > 1);

        var categoryAxis = new CategoryAxis { Position = AxisPosition.Left, Key = "categories", StartPosition = 1, EndPosition = 0, GapWidth = 0.4 };
        categoryAxis.Labels.AddRange(categories.Select(Label));
        model.Axes.Add(categoryAxis);
        var values = series.SelectMany(s => s.Values).Where(v => double.IsFinite(v) && (!log || v > 0)).DefaultIfEmpty(1).ToList();
        var (lowest, highest) = (Math.Pow(10, Math.Floor(Math.Log10(values.Min())) - 1), Math.Pow(10, Math.Floor(Math.Log10(values.Max())) + 1) * 1.0001);
        model.Axes.Add(log
            ? new LogarithmicAxis { Position = AxisPosition.Bottom, Key = "values", Title = axisLabel + " (log scale)", Minimum = lowest, Maximum = highest, MajorGridlineStyle = LineStyle.Solid, StringFormat = "#,0.##" }
            : new LinearAxis { Position = AxisPosition.Bottom, Key = "values", Title = axisLabel, Minimum = 0, MaximumPadding = 0.15, MajorGridlineStyle = LineStyle.Solid, StringFormat = "#,0.##" });
        foreach (var s in series)
        {
            var bars = new BarSeries
            {
                Title = Label(s.Name),
                XAxisKey = "values",
                YAxisKey = "categories",
                BaseValue = log ? lowest : 0,
                LabelFormatString = "{0:" + valueFormat + "}",
                LabelPlacement = LabelPlacement.Outside,
                FontSize = 11,
            };
            bars.Items.AddRange(s.Values.Select(v => new BarItem(double.IsFinite(v) && (!log || v > 0) ? v : double.NaN)));
            model.Series.Add(bars);
        }

        return Svg(model, 110 + (categories.Count * Math.Max(2, series.Count) * 22) + (series.Count > 1 ? 24 : 0));
    }

    /// <summary>
    /// Response time by percentile, p0 to p99.9, each strategy a line: the x axis counts nines
    /// (p90 at 1, p99 at 2, p99.9 at 3), the y axis is log, so the tail is drawn where it is.
    /// </summary>
    public static string Percentiles(string title, IReadOnlyList<DistributionLine> lines)
    {
        var model = NewModel(title, legend: true);
        model.Axes.Add(new LinearAxis
        {
            Position = AxisPosition.Bottom,
            Title = "percentile",
            Minimum = 0,
            Maximum = 3,
            MajorStep = 1,
            MinorStep = 0.5,
            MajorGridlineStyle = LineStyle.Solid,
            LabelFormatter = nines => "p" + (100 * (1 - Math.Pow(10, -nines))).ToString("0.##", CultureInfo.InvariantCulture),
        });
        model.Axes.Add(LatencyAxis(AxisPosition.Left, lines));
        foreach (var line in lines.Where(l => l.SortedMs.Count > 0))
        {
            var series = new LineSeries { Title = Label(line.Name), StrokeThickness = 2 };
            for (var i = 0; i <= 300; i++)
            {
                var nines = i / 100.0;
                series.Points.Add(new DataPoint(nines, Math.Max(LatencyStatistics.Percentile(line.SortedMs, 1 - Math.Pow(10, -nines)), 0.001)));
            }

            model.Series.Add(series);
        }

        return Svg(model, 480);
    }

    /// <summary>The response-time distribution: the share of answers at or below each time (log time axis).</summary>
    public static string Cdf(string title, IReadOnlyList<DistributionLine> lines)
    {
        var model = NewModel(title, legend: true);
        model.Axes.Add(LatencyAxis(AxisPosition.Bottom, lines));
        model.Axes.Add(new LinearAxis { Position = AxisPosition.Left, Title = "% of answers at or below", Minimum = 0, Maximum = 100, MajorStep = 25, MajorGridlineStyle = LineStyle.Solid });
        foreach (var line in lines.Where(l => l.SortedMs.Count > 0))
        {
            var series = new LineSeries { Title = Label(line.Name), StrokeThickness = 2 };
            var n = line.SortedMs.Count;
            var step = Math.Max(1, n / 400);
            for (var i = 0; i < n; i += step)
            {
                series.Points.Add(new DataPoint(Math.Max(line.SortedMs[i], 0.001), 100.0 * (i + 1) / n));
            }

            series.Points.Add(new DataPoint(Math.Max(line.SortedMs[^1], 0.001), 100));
            model.Series.Add(series);
        }

        return Svg(model, 480);
    }

    /// <summary>A value per second of the measured phase, each series a line.</summary>
    public static string OverTime(string title, string axisLabel, IReadOnlyList<TimeSeries> series)
    {
        var model = NewModel(title, legend: true);
        model.Axes.Add(new LinearAxis { Position = AxisPosition.Bottom, Title = "second of the measured phase", Minimum = 0, MajorGridlineStyle = LineStyle.Solid });
        model.Axes.Add(new LinearAxis { Position = AxisPosition.Left, Title = axisLabel, Minimum = 0, MaximumPadding = 0.1, MajorGridlineStyle = LineStyle.Solid, StringFormat = "#,0" });
        foreach (var s in series.Where(s => s.PerSecond.Count > 0))
        {
            var line = new LineSeries { Title = Label(s.Name), StrokeThickness = 2 };
            line.Points.AddRange(s.PerSecond.Select((v, i) => new DataPoint(i + 1, v)));
            model.Series.Add(line);
        }

        return Svg(model, 420);
    }

    /// <summary>
    /// OxyPlot.Core's one managed text measurer, its PDF renderer's (standard font metrics), in
    /// the plot's units: it measures in points, 3/4 of a pixel, so labels measured that way came out
    /// a quarter narrower and lower than a browser draws them (clipped names, overlapping legends).
    /// </summary>
    private sealed class PixelTextMeasurer(double width, double height, OxyColor background) : PdfRenderContext(width, height, background)
    {
        public override OxySize MeasureText(string text, string fontFamily, double fontSize, double fontWeight)
        {
            var points = base.MeasureText(text, fontFamily, fontSize, fontWeight);
            return new OxySize(points.Width * 4 / 3, points.Height * 4 / 3);
        }
    }

    /// <summary>
    /// A strategy name as a chart label: the exporter measures text with the standard PDF fonts'
    /// metrics, which have no arrow, so "→" would be measured as nothing and the name clipped.
    /// </summary>
    private static string Label(string name) => name.Replace("→", "->", StringComparison.Ordinal);

    private static LogarithmicAxis LatencyAxis(AxisPosition position, IReadOnlyList<DistributionLine> lines)
    {
        var all = lines.Where(l => l.SortedMs.Count > 0).ToList();
        var lowest = all.Select(l => l.SortedMs[0]).Where(v => v > 0).DefaultIfEmpty(1).Min();
        var highest = all.Select(l => l.SortedMs[^1]).DefaultIfEmpty(10).Max();
        return new LogarithmicAxis
        {
            Position = position,
            Title = "response time, ms (log scale)",
            Minimum = Math.Pow(10, Math.Floor(Math.Log10(lowest))),
            // A hair past the decade: ending on exactly 10^n, rounding drew its top tick as 900.
            Maximum = Math.Pow(10, Math.Floor(Math.Log10(Math.Max(highest, lowest * 10))) + 1) * 1.0001,
            MajorGridlineStyle = LineStyle.Solid,
            MinorGridlineStyle = LineStyle.Dot,
            StringFormat = "#,0.###",
        };
    }

    private static PlotModel NewModel(string title, bool legend)
    {
        var model = new PlotModel
        {
            Title = title,
            TitleFontSize = 15,
            DefaultFont = "Helvetica",
            DefaultFontSize = 12,
            Background = OxyColors.White,
            PlotAreaBorderColor = OxyColor.FromRgb(0xcc, 0xcc, 0xcc),
        };
        model.DefaultColors = Palette;
        if (legend)
        {
            // One entry a line, a little apart: long strategy names side by side overlapped.
            model.Legends.Add(new Legend { LegendPosition = LegendPosition.BottomLeft, LegendPlacement = LegendPlacement.Outside, LegendOrientation = LegendOrientation.Vertical, LegendLineSpacing = 4 });
        }

        return model;
    }

    private static string Svg(PlotModel model, double height)
    {
        foreach (var axis in model.Axes)
        {
            // The exporter's metrics measure tick labels narrower than a browser draws them.
            axis.AxisTitleDistance = 12;
        }

        var svg = SvgExporter.ExportToString(model, Width, height, isDocument: false, textMeasurer: new PixelTextMeasurer(Width, height, model.Background));

        // The exporter writes an XML prolog even for a fragment; the HTML report inlines the SVG.
        return svg[svg.IndexOf("<svg", StringComparison.Ordinal)..];
    }
}
