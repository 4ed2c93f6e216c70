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

    private readonly string? _name;

    private LocalPostgres(string script, string connectionString, bool started, string? name)
    {
        _script = script;
        ConnectionString = connectionString;
        _started = started;
        _name = name;
    }

    public string ConnectionString { get; }

    /// <summary><c>eng/postgres.sh</c> of the repository this program was built in, or null when it cannot be found (a copied build).</summary>
    public static string? FindScript() =>
        Allocator.Testing.Repository.TryFind(AppContext.BaseDirectory) is { } root && File.Exists(Path.Combine(root, "eng", "postgres.sh"))
            ? Path.Combine(root, "eng", "postgres.sh")
            : null;

    /// <summary>Starts (or reuses) the cluster; its progress goes to <paramref name="progress"/>.</summary>
    /// <param name="name">A cluster of its own in .pg/&lt;name&gt;/ (<c>eng/postgres.sh --name</c>); null: the repository's one.</param>
    public static async Task<LocalPostgres> StartAsync(string script, TextWriter progress, CancellationToken cancellationToken, string? name = null)
    {
        string[] named = name is null ? [] : ["--name", name];
        var (_, status) = await RunAsync(script, ["status", .. named], cancellationToken);
        var wasRunning = status.Contains("running on", StringComparison.Ordinal);
        progress.WriteLine(wasRunning
            ? $"postgres: using the running cluster of {script} {string.Join(' ', named)}"
            : name is null
                ? $"postgres: no connection string given (--connection, ALLOCATOR_POSTGRES): starting one with {script}"
                : $"postgres: starting {script} --name {name}");
        var (exitCode, output) = await RunAsync(script, ["start", .. named], cancellationToken);
        var connection = output.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).LastOrDefault();
        if (exitCode != 0 || connection is null || !connection.StartsWith("Host=", StringComparison.Ordinal))
        {
            throw new InvalidOperationException($"{script} start failed (exit {exitCode}); see its output above.");
        }

        return new LocalPostgres(script, connection, started: !wasRunning, name);
    }

    /// <summary>The cluster's data directory (postmaster.pid is there).</summary>
    public string DataDirectory => Path.Combine(Path.GetDirectoryName(Path.GetDirectoryName(_script)!)!, ".pg", _name ?? "", "data");

    public async ValueTask DisposeAsync()
    {
        if (_started)
        {
            await RunAsync(_script, _name is null ? ["stop"] : ["stop", "--name", _name], CancellationToken.None);
        }
    }

    /// <returns>The exit code and standard output; standard error (the script's progress, apt-get) passes through.</returns>
    private static async Task<(int ExitCode, string Output)> RunAsync(string script, string[] arguments, CancellationToken cancellationToken)
    {
        var start = new ProcessStartInfo("bash") { RedirectStandardOutput = true, UseShellExecute = false };
        start.ArgumentList.Add(script);
        foreach (var argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        using var process = Process.Start(start) ?? throw new InvalidOperationException("Cannot start bash.");
        var output = await process.StandardOutput.ReadToEndAsync(cancellationToken);
        await process.WaitForExitAsync(cancellationToken);
        return (process.ExitCode, output);
    }
}
