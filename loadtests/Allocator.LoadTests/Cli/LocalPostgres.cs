using System.Diagnostics;

namespace Allocator.LoadTests.Cli;

/// <summary>
/// The throwaway PostgreSQL of <c>eng/postgres.sh</c> (the one eng/run.sh and eng/test.sh use),
/// started when a run is given no connection string, so that a fresh clone runs every strategy
/// on a real database. A cluster this started is stopped when it is disposed; one that was
/// already running is left alone.
/// </summary>
internal sealed class LocalPostgres : IAsyncDisposable
{
    private readonly string _script;
    private readonly bool _started;

    private LocalPostgres(string script, string connectionString, bool started)
    {
        _script = script;
        ConnectionString = connectionString;
        _started = started;
    }

    public string ConnectionString { get; }

    /// <summary><c>eng/postgres.sh</c> of the repository this program was built in, or null when it cannot be found (a copied build).</summary>
    public static string? FindScript()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            var script = Path.Combine(dir.FullName, "eng", "postgres.sh");
            if (File.Exists(script) && File.Exists(Path.Combine(dir.FullName, "Allocator.sln")))
            {
                return script;
            }
        }

        return null;
    }

    /// <summary>Starts (or reuses) the cluster; its progress goes to <paramref name="progress"/>.</summary>
    public static async Task<LocalPostgres> StartAsync(string script, TextWriter progress, CancellationToken cancellationToken)
    {
        var (_, status) = await RunAsync(script, "status", cancellationToken);
        var wasRunning = status.Contains("running on", StringComparison.Ordinal);
        progress.WriteLine(wasRunning
            ? $"postgres: using the running cluster of {script}"
            : $"postgres: no connection string given (--connection, ALLOCATOR_POSTGRES): starting one with {script}");
        var (exitCode, output) = await RunAsync(script, "start", cancellationToken);
        var connection = output.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).LastOrDefault();
        if (exitCode != 0 || connection is null || !connection.StartsWith("Host=", StringComparison.Ordinal))
        {
            throw new InvalidOperationException($"{script} start failed (exit {exitCode}); see its output above.");
        }

        return new LocalPostgres(script, connection, started: !wasRunning);
    }

    public async ValueTask DisposeAsync()
    {
        if (_started)
        {
            await RunAsync(_script, "stop", CancellationToken.None);
        }
    }

    /// <returns>The exit code and standard output; standard error (the script's progress, apt-get) passes through.</returns>
    private static async Task<(int ExitCode, string Output)> RunAsync(string script, string command, CancellationToken cancellationToken)
    {
        var start = new ProcessStartInfo("bash") { RedirectStandardOutput = true, UseShellExecute = false };
        start.ArgumentList.Add(script);
        start.ArgumentList.Add(command);
        using var process = Process.Start(start) ?? throw new InvalidOperationException("Cannot start bash.");
        var output = await process.StandardOutput.ReadToEndAsync(cancellationToken);
        await process.WaitForExitAsync(cancellationToken);
        return (process.ExitCode, output);
    }
}
