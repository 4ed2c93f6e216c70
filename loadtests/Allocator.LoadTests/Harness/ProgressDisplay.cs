using System.Globalization;
using Spectre.Console;

namespace Allocator.LoadTests.Harness;

/// <summary>Where a run stands, once a second: totals so far and the last interval's rate and response times.</summary>
/// <param name="Target">The run's allocation count, when it stops at one.</param>
/// <param name="P50Ms">Median response time of the steps answered in the last interval (NaN: none).</param>
/// <param name="P99Ms">99th percentile of the same steps (NaN: none).</param>
internal sealed record ProgressSnapshot(string Label, long Allocations, long? Target, double PerSecond, double P50Ms, double P99Ms, long Errors, TimeSpan Elapsed, bool WarmUp)
{
    public override string ToString()
    {
        var of = Target is { } target ? $" / {target:N0}" : "";
        var latency = double.IsNaN(P50Ms) ? "" : string.Create(CultureInfo.InvariantCulture, $", p50 {P50Ms:0.0} ms, p99 {P99Ms:0.0} ms");
        return string.Create(CultureInfo.InvariantCulture, $"[{Label}] {Allocations:N0}{of} allocations, {PerSecond:N0}/s{latency}, errors {Errors:N0}, {Elapsed.TotalSeconds:0} s{(WarmUp ? " (warm-up)" : "")}");
    }
}

/// <summary>Shows the progress of one run while it runs.</summary>
internal interface IProgressDisplay
{
    /// <summary>Runs <paramref name="report"/>, which calls the given action with each new snapshot, and shows them.</summary>
    Task ShowAsync(Func<Action<ProgressSnapshot>, Task> report);
}

/// <summary>One line per snapshot: for logs, CI and anything that is not a terminal.</summary>
internal sealed class TextProgressDisplay(TextWriter writer) : IProgressDisplay
{
    public Task ShowAsync(Func<Action<ProgressSnapshot>, Task> report) => report(s => writer.WriteLine(s.ToString()));
}

/// <summary>
/// A live table in the terminal (Spectre.Console), as NBomber shows a running scenario:
/// allocations so far, requests per second, p50 and p99 of the last second, errors so far. The
/// last state stays on screen when the run ends.
/// </summary>
internal sealed class LiveProgressDisplay(IAnsiConsole console) : IProgressDisplay
{
    /// <summary>On standard error when that is a terminal (standard output keeps the tables and report paths); null otherwise.</summary>
    public static LiveProgressDisplay? ForTerminal() =>
        Console.IsErrorRedirected
            ? null
            : new LiveProgressDisplay(AnsiConsole.Create(new AnsiConsoleSettings { Out = new AnsiConsoleOutput(Console.Error), Interactive = InteractionSupport.Yes }));

    public Task ShowAsync(Func<Action<ProgressSnapshot>, Task> report)
    {
        var table = new Table().Border(TableBorder.Rounded).Expand();
        foreach (var column in new[] { "run", "allocations", "req/s", "p50", "p99", "errors", "elapsed" })
        {
            table.AddColumn(new TableColumn(column).RightAligned());
        }

        table.Columns[0].LeftAligned();
        table.AddRow("starting", "", "", "", "", "", "");
        return console.Live(table).AutoClear(false).StartAsync(context => report(s =>
        {
            table.UpdateCell(0, 0, new Markup($"{Markup.Escape(s.Label)}{(s.WarmUp ? " [yellow](warm-up)[/]" : "")}"));
            table.UpdateCell(0, 1, s.Target is { } target ? $"{s.Allocations:N0} / {target:N0}" : s.Allocations.ToString("N0", CultureInfo.InvariantCulture));
            table.UpdateCell(0, 2, s.PerSecond.ToString("N0", CultureInfo.InvariantCulture));
            table.UpdateCell(0, 3, double.IsNaN(s.P50Ms) ? "–" : s.P50Ms.ToString("0.0", CultureInfo.InvariantCulture) + " ms");
            table.UpdateCell(0, 4, double.IsNaN(s.P99Ms) ? "–" : s.P99Ms.ToString("0.0", CultureInfo.InvariantCulture) + " ms");
            table.UpdateCell(0, 5, new Markup(s.Errors == 0 ? "0" : $"[red]{s.Errors:N0}[/]"));
            table.UpdateCell(0, 6, s.Elapsed.TotalSeconds.ToString("0", CultureInfo.InvariantCulture) + " s");
            context.Refresh();
        }));
    }
}
