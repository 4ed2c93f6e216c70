using System.Diagnostics;
using System.Globalization;
using Allocator.Networking;
using Npgsql;

namespace Allocator.Reliability.Cluster;

/// <summary>
/// A PostgreSQL cluster of the scenarios' own (<c>.pg/faults/</c>, or <c>.pg/&lt;name&gt;/</c>; its own port), for the
/// scenarios that stop and restart the server: the tests' PostgreSQL of eng/postgres.sh is never
/// restarted. Same server binaries and durability settings (fsync, synchronous_commit) as
/// eng/postgres.sh; run as the postgres user when this process is root.
/// </summary>
internal sealed class PrivatePostgres : IAsyncDisposable
{
    private readonly string _bin;
    private readonly string _data;
    private readonly string _log;

    private PrivatePostgres(string bin, string data, int port)
    {
        _bin = bin;
        _data = data;
        _log = Path.Combine(Path.GetDirectoryName(data)!, "postgres.log");
        Port = port;
    }

    public int Port { get; }

    public string ConnectionString => $"Host=127.0.0.1;Port={Port.ToString(CultureInfo.InvariantCulture)};Username=postgres;Database=allocator";

    /// <param name="name">The folder under .pg/ (a second one for the database-down scenario, issue 23).</param>
    public static async Task<PrivatePostgres> StartAsync(CancellationToken cancellationToken, string name = "faults")
    {
        var bin = Directory.GetDirectories("/usr/lib/postgresql").Select(d => Path.Combine(d, "bin"))
            .Where(d => File.Exists(Path.Combine(d, "pg_ctl")))
            .OrderBy(d => int.Parse(Path.GetFileName(Path.GetDirectoryName(d)!), CultureInfo.InvariantCulture))
            .LastOrDefault() ?? throw new InvalidOperationException("PostgreSQL server binaries not found under /usr/lib/postgresql (eng/postgres.sh installs them).");
        var root = Path.Combine(Repository.Root, ".pg", name);
        var data = Path.Combine(root, "data");
        Directory.CreateDirectory(root);
        await RunAsync("chown", ["postgres", root], cancellationToken, asPostgres: false, allowFailure: true);
        var server = new PrivatePostgres(bin, data, FreePort.Next());
        if (!File.Exists(Path.Combine(data, "PG_VERSION")))
        {
            await server.PgAsync("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8"], cancellationToken);
            await File.AppendAllTextAsync(Path.Combine(data, "postgresql.conf"), $"""

                listen_addresses = '127.0.0.1'
                unix_socket_directories = '{root}'
                max_connections = 300
                shared_buffers = 64MB
                log_min_messages = warning
                autovacuum_naptime = 1s

                """, cancellationToken);
        }

        await server.StopAsync("immediate", allowFailure: true, cancellationToken); // a run that crashed may have left it running
        await server.StartAgainAsync(cancellationToken);
        await using (var connection = new NpgsqlConnection(server.ConnectionString.Replace("Database=allocator", "Database=postgres", StringComparison.Ordinal)))
        {
            await connection.OpenAsync(cancellationToken);
            await using var exists = new NpgsqlCommand("SELECT count(*) FROM pg_database WHERE datname = 'allocator'", connection);
            if ((long)(await exists.ExecuteScalarAsync(cancellationToken))! == 0)
            {
                await using var create = new NpgsqlCommand("CREATE DATABASE allocator", connection);
                await create.ExecuteNonQueryAsync(cancellationToken);
            }
        }

        return server;
    }

    /// <summary><c>pg_ctl stop -m fast</c> (clients are told, transactions roll back) or <c>-m immediate</c> (a crash: recovery from WAL at the next start).</summary>
    public Task StopAsync(string mode, CancellationToken cancellationToken) => StopAsync(mode, allowFailure: false, cancellationToken);

    public Task StartAgainAsync(CancellationToken cancellationToken) =>
        PgAsync("pg_ctl", ["-D", _data, "-l", _log, "-o", $"-p {Port.ToString(CultureInfo.InvariantCulture)}", "-w", "-t", "60", "start"], cancellationToken);

    private Task StopAsync(string mode, bool allowFailure, CancellationToken cancellationToken) =>
        PgAsync("pg_ctl", ["-D", _data, "-m", mode, "-w", "-t", "60", "stop"], cancellationToken, allowFailure);

    /// <summary>
    /// SIGSTOP to the server and every process of it (issue 39, #9): a database that hangs rather
    /// than stops. Connections stay open and new ones are accepted by the kernel, but nothing
    /// answers, as on a partitioned or frozen host. Returns the processes stopped.
    /// </summary>
    public async Task<int> FreezeAsync(CancellationToken cancellationToken) => await SignalAllAsync("-STOP", cancellationToken);

    /// <summary>SIGCONT to what <see cref="FreezeAsync"/> stopped: everything held back goes on.</summary>
    public async Task ThawAsync(CancellationToken cancellationToken) => await SignalAllAsync("-CONT", cancellationToken);

    private async Task<int> SignalAllAsync(string signal, CancellationToken cancellationToken)
    {
        var postmaster = (await File.ReadAllLinesAsync(Path.Combine(_data, "postmaster.pid"), cancellationToken))[0].Trim();

        // The postmaster first: once it is stopped it forks no more children, so the list below
        // is whole. A child may still exit between the list and the signal (a backend whose
        // client hung up, found gone by the thaw): "No such process" for a child is no failure.
        await RunAsync("kill", [signal, postmaster], cancellationToken, asPostgres: false, allowFailure: false);
        var children = Directory.GetDirectories("/proc")
            .Select(Path.GetFileName)
            .Where(pid => pid!.All(char.IsAsciiDigit) && ParentOf(pid!) == postmaster)
            .Select(pid => pid!)
            .ToList();
        if (children.Count > 0)
        {
            await RunAsync("kill", [signal, .. children], cancellationToken, asPostgres: false, allowFailure: true);
        }

        return children.Count + 1;
    }

    /// <summary>A process's parent id, from /proc/PID/stat (null when it has gone).</summary>
    private static string? ParentOf(string pid)
    {
        try
        {
            var stat = File.ReadAllText($"/proc/{pid}/stat");
            return stat[(stat.LastIndexOf(')') + 2)..].Split(' ')[1];
        }
        catch (IOException)
        {
            return null;
        }
    }

    public async ValueTask DisposeAsync()
    {
        await SignalAllAsync("-CONT", CancellationToken.None).ContinueWith(_ => { }, TaskScheduler.Default); // never leave it frozen
        await StopAsync("fast", allowFailure: true, CancellationToken.None);
    }

    private Task PgAsync(string tool, string[] args, CancellationToken cancellationToken, bool allowFailure = false) =>
        RunAsync(Path.Combine(_bin, tool), args, cancellationToken, asPostgres: true, allowFailure);

    private static async Task RunAsync(string file, string[] args, CancellationToken cancellationToken, bool asPostgres, bool allowFailure)
    {
        var root = Environment.UserName == "root";
        var start = asPostgres && root ? new ProcessStartInfo("runuser", ["-u", "postgres", "--", file, .. args]) : new ProcessStartInfo(file, args);
        start.RedirectStandardOutput = true;
        start.RedirectStandardError = true;
        using var process = Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync(cancellationToken);
        var error = process.StandardError.ReadToEndAsync(cancellationToken);
        await process.WaitForExitAsync(cancellationToken);
        if (process.ExitCode != 0 && !allowFailure)
        {
            throw new InvalidOperationException($"{Path.GetFileName(file)} {string.Join(' ', args)} failed ({process.ExitCode}): {await output}{await error}");
        }
    }
}
