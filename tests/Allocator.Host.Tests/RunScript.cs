using System.Diagnostics;
using System.Globalization;
using System.Text.RegularExpressions;
using Allocator.Networking;
using Xunit.Abstractions;

namespace Allocator.Host.Tests;

/// <summary>
/// <c>eng/run.sh [--instances N] [--databases N] [--dashboard] [--orleans-dashboard] [--tls] [--verbose] [-- host arguments]</c> as a user runs it (on the
/// tests' PostgreSQL, without building again), on free ports, read back from what it prints;
/// disposing sends it SIGTERM, which stops every process it started. What it shows on the console
/// (stdout and stderr, in the order read) is kept: <see cref="FirstScreen"/>, <see cref="StandardError"/>.
/// </summary>
internal sealed partial class RunScript : IAsyncDisposable
{
    // eng/run.sh keeps its instances' pids and addresses in artifacts/run/ of the repository and
    // clears them at start: two runs at once (test classes run in parallel) took each other's
    // files, and a rolling restart then missed an instance whose pid file was gone. One at a time.
    private static readonly SemaphoreSlim OneAtATime = new(1, 1);

    private readonly Process _script;
    private readonly List<int> _pids;
    private readonly ConsoleLines _console;

    private RunScript(Process script, List<Uri> urls, List<int> siloPorts, List<int> pids, string key, Uri? dashboard, ConsoleLines console, string? logFile)
    {
        _script = script;
        Urls = urls;
        SiloPorts = siloPorts;
        _pids = pids;
        Key = key;
        Dashboard = dashboard;
        _console = console;
        LogFile = logFile;
    }

    /// <summary>Each instance's base address, in instance order.</summary>
    public List<Uri> Urls { get; }

    /// <summary>Each instance's silo port (printed with <c>--instances</c> above 1).</summary>
    public List<int> SiloPorts { get; }

    /// <summary>The demo admin key the script created.</summary>
    public string Key { get; }

    /// <summary>The Aspire dashboard's address, with <c>dashboard: true</c>.</summary>
    public Uri? Dashboard { get; }

    /// <summary>The console's lines (stdout and stderr) before the service's block ("Allocator is running ...").</summary>
    public IReadOnlyList<string> FirstScreen => _console.FirstScreen;

    /// <summary>Every line written to stderr so far.</summary>
    public IReadOnlyList<string> StandardError => _console.StandardError;

    /// <summary>The log file the script names for its one instance (not with several), relative to the repository's root.</summary>
    public string? LogFile { get; }

    /// <summary>Waits until a line on stderr contains <paramref name="text"/>, and returns it.</summary>
    public async Task<string> WaitForStandardErrorAsync(string text, TimeSpan timeout)
    {
        using var deadline = new CancellationTokenSource(timeout);
        while (true)
        {
            if (StandardError.FirstOrDefault(l => l.Contains(text, StringComparison.Ordinal)) is { } line)
            {
                return line;
            }

            if (deadline.IsCancellationRequested)
            {
                throw new TimeoutException($"No line with '{text}' on eng/run.sh's stderr within {timeout}.");
            }

            await Task.Delay(100, CancellationToken.None);
        }
    }

    /// <param name="databases">More than 1: the script starts the further PostgreSQL clusters itself (.pg/db2/…), as for a newcomer.</param>
    /// <param name="newcomerLogLevels">The host's own log levels (Information), as a newcomer runs it; otherwise Warning, for quieter test output.</param>
    public static async Task<RunScript> StartAsync(int instances, ITestOutputHelper output, bool dashboard = false, bool orleansDashboard = false, IReadOnlyList<string>? hostArgs = null, int databases = 1, bool tls = false, bool verbose = false, bool newcomerLogLevels = false)
    {
        if (!await OneAtATime.WaitAsync(TimeSpan.FromMinutes(10)))
        {
            throw new TimeoutException("Another eng/run.sh of these tests ran for 10 minutes.");
        }

        try
        {
            return await StartOneAsync(instances, output, dashboard, orleansDashboard, hostArgs, databases, tls, verbose, newcomerLogLevels);
        }
        catch
        {
            OneAtATime.Release();
            throw;
        }
    }

    private static async Task<RunScript> StartOneAsync(int instances, ITestOutputHelper output, bool dashboard, bool orleansDashboard, IReadOnlyList<string>? hostArgs, int databases, bool tls, bool verbose, bool newcomerLogLevels)
    {
        List<string> args = ["eng/run.sh", "--instances", instances.ToString(CultureInfo.InvariantCulture), "--databases", databases.ToString(CultureInfo.InvariantCulture)];
        if (dashboard)
        {
            args.Add("--dashboard");
        }

        if (orleansDashboard)
        {
            args.Add("--orleans-dashboard");
        }

        if (tls)
        {
            args.Add("--tls");
        }

        if (verbose)
        {
            args.Add("--verbose");
        }

        if (hostArgs is { Count: > 0 })
        {
            args.Add("--");
            args.AddRange(hostArgs);
        }

        var start = new ProcessStartInfo("bash", args)
        {
            WorkingDirectory = Repository.Root,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        start.Environment["ConnectionStrings__Allocator"] = TestPostgres.ConnectionString;
        start.Environment["ALLOCATOR_NO_BUILD"] = "1";
        start.Environment.Remove("ALLOCATOR_URLS");
        start.Environment["ALLOCATOR_BASE_PORT"] = FreePort.Range(instances).ToString(CultureInfo.InvariantCulture);
        start.Environment["ALLOCATOR_SILO_BASE_PORT"] = FreePort.Range(instances).ToString(CultureInfo.InvariantCulture);
        start.Environment["ALLOCATOR_DASHBOARD_URL"] = $"http://127.0.0.1:{FreePort.Next()}";
        start.Environment["ALLOCATOR_DASHBOARD_OTLP_URL"] = $"http://127.0.0.1:{FreePort.Next()}";
        start.Environment.Remove("Logging__Console__LogToStandardErrorThreshold");
        if (!newcomerLogLevels)
        {
            start.Environment["Logging__LogLevel__Default"] = "Warning";
        }

        var script = Process.Start(start)!;
        var console = new ConsoleLines();
        _ = console.ReadStandardErrorAsync(script, output);
        List<Uri> urls = [];
        List<int> siloPorts = [];
        List<int> pids = [];
        string? key = null;
        string? logFile = null;
        Uri? viewer = null;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(180));
        while (key is null || urls.Count < instances || (dashboard && viewer is null))
        {
            var line = await script.StandardOutput.ReadLineAsync(timeout.Token)
                ?? throw new InvalidOperationException("eng/run.sh ended before its instances were ready.");
            output.WriteLine("run.sh: " + line);
            console.Add(line, standardError: false);
            if (LogFileLine().Match(line) is { Success: true } f)
            {
                logFile = f.Groups["file"].Value;
            }
            else if (Instance().Match(line) is { Success: true } m)
            {
                urls.Add(new Uri(m.Groups["url"].Value + "/"));
                siloPorts.Add(int.Parse(m.Groups["silo"].Value, CultureInfo.InvariantCulture));
                pids.Add(int.Parse(m.Groups["pid"].Value, CultureInfo.InvariantCulture));
            }
            else if (instances == 1 && SingleInstance().Match(line) is { Success: true } single)
            {
                urls.Add(new Uri(single.Groups["url"].Value + "/"));
            }
            else if (TraceViewer().Match(line) is { Success: true } v)
            {
                viewer = new Uri(v.Groups["url"].Value + "/");
            }
            else if (line.StartsWith("X-Api-Key: ", StringComparison.Ordinal))
            {
                key = line["X-Api-Key: ".Length..].Trim();
            }
        }

        _ = DrainAsync(script, console);
        return new RunScript(script, urls, siloPorts, pids, key, viewer, console, logFile);
    }

    public void Kill(int instance) => Process.GetProcessById(_pids[instance]).Kill(); // SIGKILL

    public async ValueTask DisposeAsync()
    {
        try
        {
            await StopAsync();
        }
        finally
        {
            OneAtATime.Release();
        }
    }

    private async Task StopAsync()
    {
        using (var term = Process.Start("kill", ["-TERM", _script.Id.ToString(CultureInfo.InvariantCulture)]))
        {
            await term.WaitForExitAsync();
        }

        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        try
        {
            await _script.WaitForExitAsync(timeout.Token);
        }
        catch (OperationCanceledException)
        {
            // The instances run.sh started, including those it started again after a restart.
            var current = Directory.Exists(Path.Combine(Repository.Root, "artifacts", "run"))
                ? Directory.GetFiles(Path.Combine(Repository.Root, "artifacts", "run"), "instance-*.pid")
                    .Select(f => int.TryParse(File.ReadAllText(f).Trim(), CultureInfo.InvariantCulture, out var pid) ? pid : 0)
                : [];
            foreach (var pid in _pids.Concat(current).Where(p => p > 0).Distinct())
            {
                try
                {
                    Process.GetProcessById(pid).Kill();
                }
                catch (ArgumentException)
                {
                    // already gone
                }
            }
        }

        _script.Dispose();
    }

    private static async Task DrainAsync(Process script, ConsoleLines console)
    {
        while (await script.StandardOutput.ReadLineAsync() is { } line)
        {
            console.Add(line, standardError: false);
        }
    }

    [GeneratedRegex(@"^allocator: starting the service; its full log goes to (?<file>\S+)$")]
    private static partial Regex LogFileLine();

    [GeneratedRegex(@"instance (?<i>\d+): (?<url>http://\S+)\s+silo port (?<silo>\d+)\s+pid (?<pid>\d+)")]
    private static partial Regex Instance();

    [GeneratedRegex(@"^Allocator is running on (?<url>http://[^\s/]+)")]
    private static partial Regex SingleInstance();

    [GeneratedRegex(@"^Trace viewer .*: (?<url>http://[^\s/]+)/traces")]
    private static partial Regex TraceViewer();

    /// <summary>The lines the script's console shows, stdout and stderr as they were read.</summary>
    private sealed class ConsoleLines
    {
        private readonly object _gate = new();
        private readonly List<string> _firstScreen = [];
        private readonly List<string> _standardError = [];
        private bool _blockSeen;

        public IReadOnlyList<string> FirstScreen
        {
            get
            {
                lock (_gate)
                {
                    return [.. _firstScreen];
                }
            }
        }

        public IReadOnlyList<string> StandardError
        {
            get
            {
                lock (_gate)
                {
                    return [.. _standardError];
                }
            }
        }

        public void Add(string line, bool standardError)
        {
            lock (_gate)
            {
                _blockSeen |= !standardError && line.StartsWith("Allocator is running", StringComparison.Ordinal);
                if (!_blockSeen)
                {
                    _firstScreen.Add(line);
                }

                if (standardError)
                {
                    _standardError.Add(line);
                }
            }
        }

        public async Task ReadStandardErrorAsync(Process script, ITestOutputHelper output)
        {
            while (await script.StandardError.ReadLineAsync() is { } line)
            {
                Add(line, standardError: true);
                try
                {
                    output.WriteLine("run.sh stderr: " + line);
                }
                catch (InvalidOperationException)
                {
                    // the test has ended; the line is kept above
                }
            }
        }
    }
}
