using System.CommandLine;
using System.CommandLine.Help;
using System.Globalization;
using Allocator.Reliability.Scenarios;

namespace Allocator.Reliability.Cli;

/// <summary>The parsed command line of eng/faults.sh: which scenarios, how long, or only the list.</summary>
/// <remarks>
/// One System.CommandLine definition: <see cref="Usage"/> is its help text, and anything it does
/// not define (a misspelt <c>--quik</c>, an unknown scenario) is an error with exit code 2,
/// never silently dropped (a dropped <c>--quick</c> used to start the whole 12-minute suite).
/// </remarks>
internal sealed record FaultsCommandLine(bool Quick, bool List, IReadOnlyList<string> Scenarios, bool Help)
{
    private static readonly Option<bool> QuickOption = new("--quick") { Description = "The short variant of each scenario (the one CI runs, about 3 minutes in all)." };
    private static readonly Option<bool> ListOption = new("--list") { Description = "List the scenarios and what each proves, then exit." };
    private static readonly Argument<string[]> ScenariosArgument = CreateScenariosArgument();

    /// <summary>The whole grammar.</summary>
    internal static RootCommand Definition { get; } = new(
        "Fault scenarios against real Allocator host processes on PostgreSQL, each followed by the invariant checker. " +
        "ALLOCATOR_POSTGRES is the database (eng/postgres.sh). Exit codes: 0 no violation, 1 an invariant was violated, 2 bad usage.")
    {
        QuickOption, ListOption, ScenariosArgument,
    };

    /// <summary>The help text of <see cref="Definition"/>.</summary>
    public static string Usage { get; } = HelpText();

    /// <exception cref="ArgumentException">The arguments do not fit the definition; the message says why.</exception>
    public static FaultsCommandLine Parse(IReadOnlyList<string> args)
    {
        var result = Definition.Parse(args);
        if (result.Errors.Count > 0)
        {
            throw new ArgumentException(string.Join(Environment.NewLine, result.Errors.Select(e => e.Message)));
        }

        return new FaultsCommandLine(
            result.GetValue(QuickOption),
            result.GetValue(ListOption),
            result.GetValue(ScenariosArgument) ?? [],
            Help: result.Action is HelpAction);
    }

    private static Argument<string[]> CreateScenariosArgument()
    {
        var argument = new Argument<string[]>("scenario")
        {
            Description = "Only these scenarios (default: every one, in catalogue order).",
            Arity = ArgumentArity.ZeroOrMore,
            HelpName = "scenario",
        };
        argument.AcceptOnlyFromAmong([.. ScenarioCatalogue.All.Select(s => s.Name)]);
        return argument;
    }

    private static string HelpText()
    {
        using var writer = new StringWriter(CultureInfo.InvariantCulture);
        Definition.Parse(["--help"]).Invoke(new InvocationConfiguration { Output = writer, Error = writer });
        return writer.ToString().TrimEnd() + Environment.NewLine;
    }
}
