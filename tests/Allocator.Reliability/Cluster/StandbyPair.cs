using System.Diagnostics;
using Allocator.Networking;
using Npgsql;

namespace Allocator.Reliability.Cluster;

/// <summary>
/// A PostgreSQL primary and its streaming standby of the scenarios' own (issue 48), made and
/// failed over by <c>eng/postgres.sh</c> (<c>start</c>, <c>standby</c>, <c>promote</c>,
/// <c>rejoin</c> with <c>--name</c>), the commands an operator runs by hand: one implementation of
/// standbys for people and tests. The instances reach it through one connection string naming
/// both hosts (<c>Target Session Attributes=primary</c>), as they would a Patroni cluster.
/// </summary>
internal sealed class StandbyPair : IAsyncDisposable
{
    private readonly string _name;

    private StandbyPair(string name, string connectionString, bool synchronous)
    {
        _name = name;
        ConnectionString = connectionString;
        Synchronous = synchronous;
    }

    /// <summary>Both hosts; Npgsql connects to whichever is the primary.</summary>
    public string ConnectionString { get; }

    public bool Synchronous { get; }

    /// <summary>Both folders under <c>.pg/</c>: the first is the primary until a failover.</summary>
    private IEnumerable<string> Homes => [Path.Combine(Repository.Root, ".pg", _name), Path.Combine(Repository.Root, ".pg", _name + "-standby")];

    /// <summary>A fresh pair (an earlier run's folders are removed: after a failover they are in another state).</summary>
    public static async Task<StandbyPair> StartAsync(string name, bool synchronous, CancellationToken cancellationToken)
    {
        await ScriptAsync(["stop", "--name", name], cancellationToken, allowFailure: true);
        foreach (var home in new[] { name, name + "-standby" }.Select(n => Path.Combine(Repository.Root, ".pg", n)))
        {
            if (Directory.Exists(home))
            {
                Directory.Delete(home, recursive: true);
            }
        }

        // Ports from the ephemeral range the other tests' processes take theirs from, as
        // PrivatePostgres does: a port found free may still be taken before the server binds it,
        // so a start that loses that race tries again elsewhere.
        string output = "";
        for (var attempt = 1; ; attempt++)
        {
            var port = FreePort.Next().ToString(System.Globalization.CultureInfo.InvariantCulture);
            try
            {
                await ScriptAsync(["start", "--name", name], cancellationToken, port: port);
                output = await ScriptAsync(synchronous ? ["standby", "--name", name] : ["standby", "--name", name, "--async"], cancellationToken, port: port);
                break;
            }
            catch (InvalidOperationException) when (attempt < 3)
            {
                await ScriptAsync(["stop", "--name", name], cancellationToken, allowFailure: true);
                foreach (var home in new[] { name, name + "-standby" }.Select(n => Path.Combine(Repository.Root, ".pg", n)).Where(Directory.Exists))
                {
                    Directory.Delete(home, recursive: true);
                }
            }
        }

        var pair = output.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Last();
        await using (var connection = new NpgsqlConnection(new NpgsqlConnectionStringBuilder(pair) { Database = "postgres", Pooling = false }.ConnectionString))
        {
            await connection.OpenAsync(cancellationToken);
            await using var exists = new NpgsqlCommand("SELECT count(*) FROM pg_database WHERE datname = 'allocator'", connection);
            if ((long)(await exists.ExecuteScalarAsync(cancellationToken))! == 0)
            {
                await using var create = new NpgsqlCommand("CREATE DATABASE allocator", connection);
                await create.ExecuteNonQueryAsync(cancellationToken);
            }
        }

        return new StandbyPair(name, pair, synchronous);
    }

    /// <summary><c>kill -9</c> of the primary's postmaster (its backends then exit on their own): a crashed host. Returns its folder's name.</summary>
    public async Task<string> KillPrimaryAsync(CancellationToken cancellationToken)
    {
        foreach (var home in Homes)
        {
            if (await IsPrimaryAsync(home, cancellationToken))
            {
                var postmaster = (await File.ReadAllLinesAsync(Path.Combine(home, "data", "postmaster.pid"), cancellationToken))[0].Trim();
                using var kill = Process.Start("kill", ["-9", postmaster]);
                await kill.WaitForExitAsync(cancellationToken);
                return Path.GetFileName(home);
            }
        }

        throw new InvalidOperationException($"Neither server of the pair {_name} answers as a primary.");
    }

    /// <summary>
    /// Stops the standby's WAL receiver (SIGSTOP): from now on the standby lags behind whatever the
    /// primary commits, as an asynchronous standby over a slow link does. Returns its pid.
    /// </summary>
    public async Task<int> HoldBackReceiverAsync(CancellationToken cancellationToken)
    {
        foreach (var home in Homes)
        {
            if (await QueryAsync(home, "SELECT pid FROM pg_stat_wal_receiver", cancellationToken) is int pid)
            {
                await SignalAsync("-STOP", pid, cancellationToken);
                return pid;
            }
        }

        throw new InvalidOperationException($"No WAL receiver runs in the pair {_name}.");
    }

    /// <summary>
    /// Kills the held-back WAL receiver (SIGKILL), and with it what it had not read yet: the
    /// standby's postmaster restarts its recovery from what it wrote, and waits as a standby again.
    /// </summary>
    public async Task DropHeldBackAsync(int receiver, CancellationToken cancellationToken)
    {
        await SignalAsync("-KILL", receiver, cancellationToken);
        for (var clock = Stopwatch.StartNew(); clock.Elapsed < TimeSpan.FromSeconds(60); await Task.Delay(200, cancellationToken))
        {
            foreach (var home in Homes)
            {
                if (await QueryAsync(home, "SELECT pg_is_in_recovery()::int", cancellationToken) is 1)
                {
                    return;
                }
            }
        }

        throw new TimeoutException($"The standby of the pair {_name} did not come back in recovery within 60 s after its WAL receiver was killed.");
    }

    /// <summary>The standby becomes the primary (<c>eng/postgres.sh promote</c>: <c>pg_ctl promote</c>, waiting until it takes writes).</summary>
    public Task PromoteAsync(CancellationToken cancellationToken) => ScriptAsync(["promote", "--name", _name], cancellationToken);

    /// <summary>The old primary, rewound (<c>pg_rewind</c>), streams from the new one (<c>eng/postgres.sh rejoin</c>), synchronously as before.</summary>
    public Task RejoinAsync(CancellationToken cancellationToken) => ScriptAsync(["rejoin", "--name", _name], cancellationToken);

    /// <summary><c>eng/postgres.sh status</c>: which is the primary, and how it replicates.</summary>
    public Task<string> StatusAsync(CancellationToken cancellationToken) => ScriptAsync(["status", "--name", _name], cancellationToken);

    public async ValueTask DisposeAsync() => await ScriptAsync(["stop", "--name", _name], CancellationToken.None, allowFailure: true);

    private static async Task<bool> IsPrimaryAsync(string home, CancellationToken cancellationToken) =>
        await QueryAsync(home, "SELECT (NOT pg_is_in_recovery())::int", cancellationToken) is 1;

    /// <summary>One integer from the server in <paramref name="home"/> (null: no row, or it does not answer).</summary>
    private static async Task<int?> QueryAsync(string home, string sql, CancellationToken cancellationToken)
    {
        var portFile = Path.Combine(home, "port");
        if (!File.Exists(portFile))
        {
            return null;
        }

        try
        {
            var port = int.Parse((await File.ReadAllTextAsync(portFile, cancellationToken)).Trim(), System.Globalization.CultureInfo.InvariantCulture);
            await using var connection = new NpgsqlConnection($"Host=127.0.0.1;Port={port};Username=postgres;Database=postgres;Pooling=false;Timeout=3");
            await connection.OpenAsync(cancellationToken);
            await using var command = new NpgsqlCommand(sql, connection);
            return await command.ExecuteScalarAsync(cancellationToken) is int value ? value : null;
        }
        catch (Exception ex) when (ex is NpgsqlException or IOException or FormatException)
        {
            return null;
        }
    }

    private static async Task SignalAsync(string signal, int pid, CancellationToken cancellationToken)
    {
        using var kill = Process.Start("kill", [signal, pid.ToString(System.Globalization.CultureInfo.InvariantCulture)]);
        await kill.WaitForExitAsync(cancellationToken);
    }

    private static async Task<string> ScriptAsync(string[] args, CancellationToken cancellationToken, bool allowFailure = false, string? port = null)
    {
        var start = new ProcessStartInfo("bash", [Path.Combine(Repository.Root, "eng", "postgres.sh"), .. args])
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            WorkingDirectory = Repository.Root,
        };
        if (port is not null)
        {
            // The first port a named cluster tries (its standby the next free one after it).
            start.Environment["ALLOCATOR_PG_PORT"] = port;
        }

        using var process = Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync(cancellationToken);
        var error = process.StandardError.ReadToEndAsync(cancellationToken);
        await process.WaitForExitAsync(cancellationToken);
        if (process.ExitCode != 0 && !allowFailure)
        {
            throw new InvalidOperationException($"eng/postgres.sh {string.Join(' ', args)} failed ({process.ExitCode}): {await output}{await error}");
        }

        return await output;
    }
}
