namespace Allocator.LoadTests.Cli;

/// <summary>The parsed command line: a command (workload name, <c>all</c>, <c>store</c>, <c>list</c>) and options.</summary>
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
    double? Minutes = null)
{
    public const string Usage = """
        usage: dotnet run -c Release --project loadtests/Allocator.LoadTests -- <command> [options]

        commands:
          <workload>     storm-90 | storm-250 | wide-250 | loopback | big-pool | reg-storm | sustained
          all            every workload, one after the other
          store          the store benchmark: single and batched (64) allocations per second, 1,000 workers
          list           the workload table
          audit          the SQL invariant audit of an existing schema: --schema <name> [--pool <id>]

        options:
          --quick                 small sizes, each workload well under a minute
          --store memory|postgres default: postgres when a connection string is given, else memory
          --connection <string>   PostgreSQL connection string (default: $ALLOCATOR_POSTGRES)
          --strategies a,b        only the strategies whose label contains one of these
          --out <dir>             report folder root (default: loadtests/Allocator.LoadTests/reports)
          --runs <n>              store: runs per mode (default 5)
          --seconds <s>           store: length of one run (default 3)
          --callers <n>           store: concurrent callers (default 1)
          --jitter <ms>           jitter of the injected latency, bytes stay in order (default 0)
          --minutes <n>           run length of each strategy (default: the workload's; sustained 30 for issue 13)

        exit codes: 0 done, 1 an invariant audit failed, 2 bad usage, 3 a strategy could not run (not wired yet) or failed
        """;

    public static CommandLine Parse(IReadOnlyList<string> args)
    {
        string? command = null;
        var quick = false;
        var help = false;
        string? store = null, connection = null, output = null, schema = null, pool = null;
        int? runs = null, callers = null;
        double? seconds = null;
        double jitter = 0;
        double? minutes = null;
        var strategies = new List<string>();
        for (var i = 0; i < args.Count; i++)
        {
            var arg = args[i];
            string Value() => i + 1 < args.Count ? args[++i] : throw new ArgumentException($"{arg} needs a value.");
            switch (arg)
            {
                case "--quick":
                    quick = true;
                    break;
                case "--store":
                    store = Value();
                    if (store is not ("memory" or "postgres"))
                    {
                        throw new ArgumentException($"--store must be memory or postgres, not '{store}'.");
                    }

                    break;
                case "--connection":
                    connection = Value();
                    break;
                case "--strategies":
                    strategies.AddRange(Value().Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries));
                    break;
                case "--out":
                    output = Value();
                    break;
                case "--runs":
                    runs = PositiveInt(arg, Value());
                    break;
                case "--callers":
                    callers = PositiveInt(arg, Value());
                    break;
                case "--seconds":
                    seconds = double.TryParse(Value(), System.Globalization.CultureInfo.InvariantCulture, out var s) && s > 0 ? s : throw new ArgumentException("--seconds must be a positive number.");
                    break;
                case "--jitter":
                    jitter = double.TryParse(Value(), System.Globalization.CultureInfo.InvariantCulture, out var j) && j >= 0 ? j : throw new ArgumentException("--jitter must be a number of milliseconds, 0 or more.");
                    break;
                case "--minutes":
                    minutes = double.TryParse(Value(), System.Globalization.CultureInfo.InvariantCulture, out var m) && m > 0 ? m : throw new ArgumentException("--minutes must be a positive number.");
                    break;
                case "--schema":
                    schema = Value();
                    break;
                case "--pool":
                    pool = Value();
                    break;
                case "-h" or "--help" or "help":
                    help = true;
                    break;
                default:
                    if (arg.StartsWith('-') || command is not null)
                    {
                        throw new ArgumentException($"Unexpected argument '{arg}'.");
                    }

                    command = arg;
                    break;
            }
        }

        return new CommandLine(command ?? "", quick, store, connection, strategies, output, runs, seconds, callers, help || command is null, schema, pool, jitter, minutes);
    }

    private static int PositiveInt(string name, string value) =>
        int.TryParse(value, System.Globalization.CultureInfo.InvariantCulture, out var n) && n > 0 ? n : throw new ArgumentException($"{name} must be a positive integer.");
}
