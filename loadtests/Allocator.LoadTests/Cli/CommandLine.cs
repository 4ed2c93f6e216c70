using System.CommandLine;
using System.CommandLine.Help;
using System.Globalization;
using Allocator.LoadTests.Workloads;

namespace Allocator.LoadTests.Cli;

/// <summary>The parsed command line: a command (workload name, <c>all</c>, <c>store</c>, <c>list</c>, <c>audit</c>) and options.</summary>
/// <remarks>
/// The grammar is defined once, with System.CommandLine (<see cref="Definition"/>): one command
/// per workload of <see cref="WorkloadCatalogue"/>, <c>all</c>, <c>store</c>, <c>list</c> and
/// <c>audit</c>, each with its options. <see cref="Usage"/> is that definition's help text, so
/// the usage cannot drift from what the parser accepts.
/// </remarks>
internal sealed record CommandLine(
    string Command,
    bool Quick,
    string? Store,
    string? Connection,
    IReadOnlyList<string> Strategies,
    string? Output,
    int? Runs,
    double? Seconds,
    int? Callers,
    bool Help,
    string? Schema = null,
    string? Pool = null,
    double JitterMs = 0,
    double? Minutes = null,
    bool KeepSchemas = false)
{
    private const string ExitCodes =
        "Exit codes: 0 done, 1 an invariant audit failed, 2 bad usage, 3 a strategy could not run or failed with an exception.";

    // Options of every command.
    private static readonly Option<bool> QuickOption = new("--quick") { Description = "Small sizes: each workload well under a minute.", Recursive = true };
    private static readonly Option<string?> StoreOption = CreateStoreOption();
    private static readonly Option<string?> ConnectionOption = new("--connection")
    {
        Description = "PostgreSQL connection string. Default: $ALLOCATOR_POSTGRES; without either, the repository's throwaway PostgreSQL (eng/postgres.sh) is started for the run and stopped after it.",
        Recursive = true,
    };

    private static readonly Option<string[]> StrategiesOption = new("--strategies")
    {
        Description = "Only the strategies whose label contains one of these (comma separated), e.g. strict,baseline.",
        Recursive = true,
        CustomParser = result => [.. result.Tokens.SelectMany(t => t.Value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))],
    };

    private static readonly Option<string?> OutOption = new("--out") { Description = "Report folder root. Default: loadtests/Allocator.LoadTests/reports.", Recursive = true };
    private static readonly Option<double> JitterOption = CreateNonNegative("--jitter", "Jitter of the injected latency in ms; bytes stay in order. Default 0.");
    private static readonly Option<bool> KeepSchemasOption = new("--keep-schemas")
    {
        Description = "Keep each run's PostgreSQL schema (lt_<run>) even when its audit passed. Default: dropped once its audit passes; kept, and named, when it fails.",
        Recursive = true,
    };

    private static readonly Option<double?> MinutesOption = CreatePositive("--minutes", "Run length of each strategy in minutes. Default: the workload's (sustained: 10; 30 for the long run).", recursive: true);

    // Options of `store`.
    private static readonly Option<int?> RunsOption = CreatePositiveInt("--runs", "Runs per mode. Default 5 (3 with --quick).");
    private static readonly Option<double?> SecondsOption = CreatePositive("--seconds", "Length of one run in seconds. Default 3 (1 with --quick).");
    private static readonly Option<int?> CallersOption = CreatePositiveInt("--callers", "Concurrent callers. Default 1.");

    // Options of `audit`.
    private static readonly Option<string?> SchemaOption = new("--schema") { Description = "The schema to audit (required)." };
    private static readonly Option<string?> PoolOption = new("--pool") { Description = "Only this pool." };

    /// <summary>The whole grammar; <see cref="Parse"/> and <see cref="Usage"/> both come from it.</summary>
    internal static RootCommand Definition { get; } = Build();

    /// <summary>The help text of <see cref="Definition"/>, with the exit codes.</summary>
    public static string Usage { get; } = HelpOf(null);

    public static CommandLine Parse(IReadOnlyList<string> args)
    {
        if (args.Count == 0)
        {
            return new CommandLine("", false, null, null, [], null, null, null, null, Help: true);
        }

        if (args[0] == "help")
        {
            args = [.. args.Skip(1), "--help"];
        }

        var result = Definition.Parse(args);
        if (result.Errors.Count > 0)
        {
            throw new ArgumentException(string.Join(Environment.NewLine, result.Errors.Select(e => e.Message)));
        }

        var command = result.CommandResult.Command is RootCommand ? "" : result.CommandResult.Command.Name;
        return new CommandLine(
            command,
            result.GetValue(QuickOption),
            result.GetValue(StoreOption),
            result.GetValue(ConnectionOption),
            result.GetValue(StrategiesOption) ?? [],
            result.GetValue(OutOption),
            result.GetValue(RunsOption),
            result.GetValue(SecondsOption),
            result.GetValue(CallersOption),
            Help: result.Action is HelpAction || command.Length == 0,
            result.GetValue(SchemaOption),
            result.GetValue(PoolOption),
            result.GetValue(JitterOption),
            result.GetValue(MinutesOption),
            result.GetValue(KeepSchemasOption));
    }

    /// <summary>The help text of one command (e.g. <c>storm-90 --help</c>).</summary>
    public static string UsageOf(string command) =>
        Definition.Subcommands.Any(c => c.Name == command) ? HelpOf(command) : Usage;

    private static RootCommand Build()
    {
        var root = new RootCommand(
            "Allocator load storms with injected network latency, and the store benchmark. " +
            "Each workload runs every strategy side by side on a real PostgreSQL. " +
            ExitCodes)
        {
            QuickOption, StoreOption, ConnectionOption, StrategiesOption, OutOption, JitterOption, MinutesOption, KeepSchemasOption,
        };
        foreach (var workload in WorkloadCatalogue.All)
        {
            root.Add(new Command(workload.Name, $"{workload.Question}. Strategies: {string.Join("; ", workload.Strategies.Select(s => s.Label))}."));
        }

        root.Add(new Command(Scale.ScaleWorkload.Name, $"{Scale.ScaleWorkload.Question} (issue 23). Starts its own PostgreSQL servers (.pg/scale-a, .pg/scale-b) and host processes; --connection does not apply."));
        root.Add(new Command("all", "Every workload, one after the other, and a summary of all."));
        root.Add(new Command("store", "The store benchmark: single and batched (64) allocations per second, 1,000 workers.") { RunsOption, SecondsOption, CallersOption });
        root.Add(new Command("list", "The workload table: sizes, RTT, strategies."));
        root.Add(new Command("audit", "The SQL invariant audit of an existing schema.") { SchemaOption, PoolOption });
        foreach (var help in root.Options.Where(o => o.Action is HelpAction))
        {
            ((HelpAction)help.Action!).MaxWidth = 120;
        }

        return root;
    }

    /// <summary>What <c>[command] --help</c> prints.</summary>
    private static string HelpOf(string? command)
    {
        using var writer = new StringWriter(CultureInfo.InvariantCulture);
        Definition.Parse(command is null ? ["--help"] : [command, "--help"]).Invoke(new InvocationConfiguration { Output = writer, Error = writer });
        return writer.ToString().TrimEnd() + Environment.NewLine;
    }

    private static Option<string?> CreateStoreOption()
    {
        var option = new Option<string?>("--store")
        {
            Description = "memory or postgres. Default: postgres (the in-memory reference store only emulates the RTT: not database figures).",
            Recursive = true,
        };
        option.AcceptOnlyFromAmong("memory", "postgres");
        return option;
    }

    private static Option<int?> CreatePositiveInt(string name, string description)
    {
        var option = new Option<int?>(name) { Description = description };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<int?>() is <= 0)
            {
                r.AddError($"{name} must be a positive integer.");
            }
        });
        return option;
    }

    /// <param name="recursive">Also valid after a workload's name (<c>sustained --minutes 30</c>), as every workload option.</param>
    private static Option<double?> CreatePositive(string name, string description, bool recursive = false)
    {
        var option = new Option<double?>(name) { Description = description, Recursive = recursive };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<double?>() is <= 0)
            {
                r.AddError($"{name} must be a positive number.");
            }
        });
        return option;
    }

    private static Option<double> CreateNonNegative(string name, string description)
    {
        var option = new Option<double>(name) { Description = description, Recursive = true };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<double>() < 0)
            {
                r.AddError($"{name} must be 0 or more.");
            }
        });
        return option;
    }
}
