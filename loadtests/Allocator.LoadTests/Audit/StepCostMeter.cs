using System.Diagnostics;
using Allocator.LoadTests.Harness;
using Allocator.LoadTests.Scale;
using Npgsql;

namespace Allocator.LoadTests.Audit;

/// <summary>
/// What one measured step costs in CPU (issue 24): PostgreSQL's (its postmaster and every process
/// it started, from <c>/proc</c>) and this process's (the load generator plus the in-process
/// service: grains, Npgsql), per step; and how many of the <c>workers</c> updates were HOT
/// (<c>pg_stat_user_tables</c>: an update that changes no indexed column and finds room on its
/// page writes no index entry); and the WAL written per step, with its full-page images
/// (<c>pg_stat_wal</c>, server-wide: every byte a step's commit waits to flush). CPU only when
/// PostgreSQL runs on this machine (its backend's process is visible in <c>/proc</c>); otherwise
/// no figures.
/// </summary>
internal sealed class StepCostMeter
{
    private const string CountersSql =
        "SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = @schema AND relname = 'workers'";

    private const string WalSql = "SELECT ARRAY[wal_bytes::bigint, wal_fpi, wal_records] FROM pg_stat_wal";

    private readonly string _connectionString;
    private readonly string _schema;
    private readonly int _postmaster;
    private int _started;
    private long _steps;
    private Snapshot _start;
    private Task<Counters>? _startCounters;

    private StepCostMeter(string connectionString, string schema, int postmaster)
    {
        _connectionString = connectionString;
        _schema = schema;
        _postmaster = postmaster;
    }

    /// <summary>A meter for the server behind <paramref name="connectionString"/>, or null when its processes are not visible here.</summary>
    public static async Task<StepCostMeter?> CreateAsync(string connectionString, string schema, CancellationToken cancellationToken)
    {
        if (!OperatingSystem.IsLinux())
        {
            return null;
        }

        await using var connection = new NpgsqlConnection(connectionString);
        await connection.OpenAsync(cancellationToken);
        await using var command = new NpgsqlCommand("SELECT pg_backend_pid()", connection);
        var backend = (int)(await command.ExecuteScalarAsync(cancellationToken))!;
        // The backend's parent is the postmaster, if that backend is a process of this machine
        // (the command line says so: a pid of another machine or container may exist here too).
        string commandLine;
        try
        {
            commandLine = await File.ReadAllTextAsync($"/proc/{backend}/cmdline", cancellationToken);
        }
        catch (IOException)
        {
            return null;
        }

        if (!commandLine.StartsWith("postgres:", StringComparison.Ordinal))
        {
            return null;
        }

        var status = await File.ReadAllLinesAsync($"/proc/{backend}/status", cancellationToken);
        var parent = status.FirstOrDefault(l => l.StartsWith("PPid:", StringComparison.Ordinal));
        return parent is null ? null : new StepCostMeter(connectionString, schema, int.Parse(parent[5..].Trim(), System.Globalization.CultureInfo.InvariantCulture));
    }

    /// <summary>Called by every measured step: the first one starts the meter.</summary>
    public void CountStep()
    {
        if (Interlocked.Exchange(ref _started, 1) == 0)
        {
            _start = Snapshot.Take(_postmaster);
            _startCounters = ReadCountersAsync();
        }

        Interlocked.Increment(ref _steps);
    }

    /// <summary>The figures since the first measured step (none if no step was measured).</summary>
    public async Task<IReadOnlyList<ScenarioMetric>> StopAsync()
    {
        if (_startCounters is null)
        {
            return [];
        }

        var end = Snapshot.Take(_postmaster);
        var steps = Interlocked.Read(ref _steps);
        var elapsed = Stopwatch.GetElapsedTime(_start.Timestamp, end.Timestamp).TotalSeconds;
        List<ScenarioMetric> metrics =
        [
            new("PostgreSQL CPU per step", MicrosecondsPerStep(end.Postgres - _start.Postgres, steps), "µs"),
            new(".NET CPU per step (this process)", MicrosecondsPerStep(end.Process - _start.Process, steps), "µs"),
            new("PostgreSQL CPU", (end.Postgres - _start.Postgres) / CpuTime.TicksPerSecond / elapsed, "cores"),
            new(".NET CPU", (end.Process - _start.Process) / CpuTime.TicksPerSecond / elapsed, "cores"),
        ];

        // Statistics reach pg_stat_user_tables when a backend flushes them (at most once a second,
        // or when it goes idle): wait for the last ones.
        await Task.Delay(TimeSpan.FromSeconds(1.5));
        var first = await _startCounters;
        var last = await ReadCountersAsync();
        if (last.Updates > first.Updates)
        {
            metrics.Add(new("workers updates HOT", 100.0 * (last.Hot - first.Hot) / (last.Updates - first.Updates), "%"));
        }

        if (steps > 0 && first.Wal is { } wal0 && last.Wal is { } wal1)
        {
            metrics.Add(new("WAL per step", (double)(wal1[0] - wal0[0]) / steps, "bytes"));
            metrics.Add(new("WAL full-page images per step", (double)(wal1[1] - wal0[1]) / steps, ""));
            metrics.Add(new("WAL records per step", (double)(wal1[2] - wal0[2]) / steps, ""));
        }

        return metrics;
    }

    private static double MicrosecondsPerStep(long ticks, long steps) => steps == 0 ? 0 : ticks / CpuTime.TicksPerSecond * 1e6 / steps;

    private async Task<Counters> ReadCountersAsync()
    {
        await using var connection = new NpgsqlConnection(_connectionString);
        await connection.OpenAsync();
        long updates, hot;
        await using (var command = new NpgsqlCommand(CountersSql, connection))
        {
            command.Parameters.AddWithValue("schema", _schema);
            await using var reader = await command.ExecuteReaderAsync();
            await reader.ReadAsync();
            (updates, hot) = (reader.GetInt64(0), reader.GetInt64(1));
        }

        await using var wal = new NpgsqlCommand(WalSql, connection);
        try
        {
            return new Counters(updates, hot, await wal.ExecuteScalarAsync() as long[]);
        }
        catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.UndefinedTable)
        {
            // pg_stat_wal exists from PostgreSQL 14 on; before that the WAL figures are left out.
            return new Counters(updates, hot, null);
        }
    }

    /// <summary>Server counters at one moment; <see cref="Wal"/>: bytes, full-page images, records (null before PostgreSQL 14).</summary>
    private sealed record Counters(long Updates, long Hot, long[]? Wal);

    private readonly record struct Snapshot(long Timestamp, long Postgres, long Process)
    {
        public static Snapshot Take(int postmaster) =>
            new(Stopwatch.GetTimestamp(), CpuTime.OfPostgres(postmaster), CpuTime.OfProcess(Environment.ProcessId));
    }
}
